#!/usr/bin/python3
"""The Calculator toolkit (proto/tools/calculator/v1) served by a Python worker.

Same contract, same toolkit version as the Go worker in workers/calculator: the
gateway checks the contract digest, so a Python replica and a Go replica may
serve Calculator@1.0.0 side by side.

    /usr/bin/python3 calculator.py --listen 127.0.0.1:9100 --nats nats://127.0.0.1:4222

Flags take their defaults from the same environment variables as the Go
workers (TOOLFLEET_LISTEN, TOOLFLEET_NATS_URL, TOOLFLEET_ADVERTISE_ADDR,
TOOLFLEET_LOG_LEVEL, TOOLFLEET_NATS_USER/_PASSWORD/_TOKEN).
"""

import argparse
import ast
import logging
import math
import operator
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import toolfleet_worker  # noqa: E402
from toolfleet_worker import ToolError  # noqa: E402

SERVICE = "tools.calculator.v1.CalculatorService"
HERE = os.path.dirname(os.path.abspath(__file__))

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS = {"sqrt": math.sqrt, "abs": abs, "floor": math.floor, "ceil": math.ceil, "round": round,
          "sin": math.sin, "cos": math.cos, "tan": math.tan, "log": math.log, "log10": math.log10,
          "exp": math.exp, "min": min, "max": max}
_CONSTS = {"pi": math.pi, "e": math.e}
MAX_DEPTH = 100  # nesting; the contract bounds the expression at 1000 characters


def evaluate(expr):
    """Evaluates arithmetic on floats: no names but pi and e, no calls but _FUNCS."""
    try:
        tree = ast.parse(expr.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError) as e:
        raise ToolError("cannot parse the expression: %s" % e.msg if hasattr(e, "msg") else str(e))

    def ev(n, depth):
        if depth > MAX_DEPTH:
            raise ToolError("the expression is nested too deeply")
        if isinstance(n, ast.Expression):
            return ev(n.body, depth + 1)
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            return float(n.value)
        if isinstance(n, ast.Name) and n.id in _CONSTS:
            return _CONSTS[n.id]
        if isinstance(n, ast.UnaryOp) and type(n.op) in _UNARY:
            return _UNARY[type(n.op)](ev(n.operand, depth + 1))
        if isinstance(n, ast.BinOp) and type(n.op) in _BINARY:
            a, b = ev(n.left, depth + 1), ev(n.right, depth + 1)
            if isinstance(n.op, (ast.Div, ast.Mod)) and b == 0:
                raise ToolError("division by zero")
            if isinstance(n.op, ast.Pow) and abs(b) > 10000:
                raise ToolError("the exponent %g is too large" % b)
            return float(_BINARY[type(n.op)](a, b))
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _FUNCS
                and not n.keywords and len(n.args) <= 8):
            return float(_FUNCS[n.func.id](*[ev(a, depth + 1) for a in n.args]))
        raise ToolError("unsupported element in the expression: %s" % type(n).__name__)

    try:
        return ev(tree, 0)
    except (OverflowError, ValueError, ZeroDivisionError, TypeError) as e:
        raise ToolError("cannot evaluate the expression: %s" % e)


def finite(v):
    if math.isinf(v) or math.isnan(v):
        raise ToolError("the result is not a finite number (%s)" % v)
    return v


class Calculator:
    """tools.calculator.v1.CalculatorService: one method per RPC, (request, call) -> response."""

    def __init__(self, contract):
        m = contract.message
        self.Add_ = m("tools.calculator.v1.AddResponse")
        self.Sub_ = m("tools.calculator.v1.SubtractResponse")
        self.Mul_ = m("tools.calculator.v1.MultiplyResponse")
        self.Div_ = m("tools.calculator.v1.DivideResponse")
        self.Eval_ = m("tools.calculator.v1.EvaluateResponse")

    def Add(self, req, call):
        return self.Add_(result=finite(req.a + req.b))

    def Subtract(self, req, call):
        return self.Sub_(result=finite(req.a - req.b))

    def Multiply(self, req, call):
        return self.Mul_(result=finite(req.a * req.b))

    def Divide(self, req, call):
        if req.b == 0:
            raise ToolError("cannot divide by zero",
                            prompt_hint="The divisor b was 0. Division by zero is undefined; "
                                        "ask for a non-zero divisor instead of retrying.")
        return self.Div_(result=finite(req.a / req.b))

    def Evaluate(self, req, call):
        # The gateway checked the contract's bounds; a worker has other callers too.
        if not 1 <= len(req.expression) <= 1000:
            raise ToolError("the expression must be 1 to 1000 characters long")
        result = finite(evaluate(req.expression))
        call.log("info", "evaluated %d characters" % len(req.expression))
        return self.Eval_(result=result)


def main():
    env = os.environ.get
    p = argparse.ArgumentParser(description="The Calculator toolkit as a Python toolfleet worker.")
    p.add_argument("--listen", default=env("TOOLFLEET_LISTEN", "127.0.0.1:0"), help="host:port to serve gRPC on")
    p.add_argument("--nats", default=env("TOOLFLEET_NATS_URL", ""), help="NATS URL to announce on (empty: none)")
    p.add_argument("--advertise", default=env("TOOLFLEET_ADVERTISE_ADDR", ""),
                   help="address announced to the gateway (default: the listener's)")
    p.add_argument("--worker-id", default="", help="stable id in announcements (default: python-HOST-RANDOM)")
    p.add_argument("--announce-interval", type=float, default=5.0, help="seconds between announcements (ttl = 3x)")
    p.add_argument("--shutdown-timeout", type=float, default=10.0, help="seconds a drain may take on SIGTERM")
    p.add_argument("--descriptors", default=os.path.join(HERE, "descriptors.binpb"),
                   help="FileDescriptorSet of the contract (make python-worker-descriptors)")
    p.add_argument("--log-level", default=env("TOOLFLEET_LOG_LEVEL", "info"))
    a = p.parse_args()
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    contract = toolfleet_worker.Contract(a.descriptors)
    toolfleet_worker.Worker(
        contract, {SERVICE: Calculator(contract)},
        listen=a.listen, advertise=a.advertise, nats_url=a.nats, worker_id=a.worker_id,
        nats_user=env("TOOLFLEET_NATS_USER"), nats_password=env("TOOLFLEET_NATS_PASSWORD"),
        nats_token=env("TOOLFLEET_NATS_TOKEN"),
        announce_interval=a.announce_interval, shutdown_timeout=a.shutdown_timeout,
    ).run()


if __name__ == "__main__":
    main()
