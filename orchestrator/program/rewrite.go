package program

import (
	"fmt"
	"strings"

	"go.starlark.net/syntax"
)

// The bounded interpreter (see bounds.go) cannot hook Starlark's operators,
// slicing or methods: the interpreter runs them itself. So before resolving,
// the script's syntax tree is rewritten so that each of them is a call of a
// hidden builtin that checks what the operation would allocate (and charge
// the steps it would take) before doing it:
//
//	x + y        → __tf_op_add(x, y)             (every binary operator but and/or)
//	x += y       → x += __tf_pre_add(x, y)       (the check; the in-place update stays Starlark's)
//	x[a:b:c]     → __tf_slice(x, a, b, c)
//	x.name       → __tf_attr(x, "name")          (methods that allocate come back checked)
//
// Scripts may not use names that start with reservedPrefix, so they cannot
// call or shadow these builtins.
const reservedPrefix = "__tf_"

// opNames maps the binary operators the rewrite routes through builtins to
// the builtins' suffixes.
var opNames = map[syntax.Token]string{
	syntax.PLUS: "add", syntax.MINUS: "sub", syntax.STAR: "mul", syntax.SLASH: "div",
	syntax.SLASHSLASH: "floordiv", syntax.PERCENT: "mod", syntax.AMP: "and", syntax.PIPE: "or",
	syntax.CIRCUMFLEX: "xor", syntax.LTLT: "lshift", syntax.GTGT: "rshift",
	syntax.IN: "in", syntax.NOT_IN: "notin",
	syntax.EQL: "eq", syntax.NEQ: "ne", syntax.LT: "lt", syntax.GT: "gt", syntax.LE: "le", syntax.GE: "ge",
}

// augmented maps an augmented assignment's operator to its binary operator.
var augmented = map[syntax.Token]syntax.Token{
	syntax.PLUS_EQ: syntax.PLUS, syntax.MINUS_EQ: syntax.MINUS, syntax.STAR_EQ: syntax.STAR,
	syntax.SLASH_EQ: syntax.SLASH, syntax.SLASHSLASH_EQ: syntax.SLASHSLASH, syntax.PERCENT_EQ: syntax.PERCENT,
	syntax.AMP_EQ: syntax.AMP, syntax.PIPE_EQ: syntax.PIPE, syntax.CIRCUMFLEX_EQ: syntax.CIRCUMFLEX,
	syntax.LTLT_EQ: syntax.LTLT, syntax.GTGT_EQ: syntax.GTGT,
}

// checkReserved refuses a script that names a reserved builtin.
func checkReserved(f *syntax.File) error {
	var bad *syntax.Ident
	syntax.Walk(f, func(n syntax.Node) bool {
		if id, ok := n.(*syntax.Ident); ok && bad == nil && strings.HasPrefix(id.Name, reservedPrefix) {
			bad = id
		}
		return bad == nil
	})
	if bad != nil {
		return syntax.Error{Pos: bad.NamePos, Msg: fmt.Sprintf("names starting with %s are reserved", reservedPrefix)}
	}
	return nil
}

// rewriter rewrites a parsed (not yet resolved) file in place.
type rewriter struct{ err error }

func rewriteFile(f *syntax.File) error {
	if err := checkReserved(f); err != nil {
		return err
	}
	rw := &rewriter{}
	rw.stmts(f.Stmts)
	return rw.err
}

func (rw *rewriter) stmts(list []syntax.Stmt) {
	for _, s := range list {
		rw.stmt(s)
	}
}

func (rw *rewriter) stmt(s syntax.Stmt) {
	switch s := s.(type) {
	case *syntax.AssignStmt:
		if op, ok := augmented[s.Op]; ok {
			load, err := loadCopy(s.LHS)
			if err != nil {
				if rw.err == nil {
					rw.err = syntax.Error{Pos: s.OpPos, Msg: err.Error()}
				}
				return
			}
			s.RHS = call("__tf_pre_"+opNames[op], s.OpPos, rw.expr(load), rw.expr(s.RHS))
			s.LHS = rw.target(s.LHS)
			return
		}
		s.LHS = rw.target(s.LHS)
		s.RHS = rw.expr(s.RHS)
	case *syntax.DefStmt:
		rw.params(s.Params)
		rw.stmts(s.Body)
	case *syntax.ExprStmt:
		s.X = rw.expr(s.X)
	case *syntax.IfStmt:
		s.Cond = rw.expr(s.Cond)
		rw.stmts(s.True)
		rw.stmts(s.False)
	case *syntax.ForStmt:
		s.Vars = rw.target(s.Vars)
		s.X = rw.expr(s.X)
		rw.stmts(s.Body)
	case *syntax.WhileStmt:
		s.Cond = rw.expr(s.Cond)
		rw.stmts(s.Body)
	case *syntax.ReturnStmt:
		if s.Result != nil {
			s.Result = rw.expr(s.Result)
		}
	}
}

// params rewrites default values (name=value) of a def or lambda.
func (rw *rewriter) params(ps []syntax.Expr) {
	for _, p := range ps {
		if b, ok := p.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
			b.Y = rw.expr(b.Y)
		}
	}
}

// target rewrites the loads inside an assignment target, keeping the store.
func (rw *rewriter) target(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.TupleExpr:
		for i, x := range e.List {
			e.List[i] = rw.target(x)
		}
	case *syntax.ListExpr:
		for i, x := range e.List {
			e.List[i] = rw.target(x)
		}
	case *syntax.ParenExpr:
		e.X = rw.target(e.X)
	case *syntax.IndexExpr:
		e.X = rw.expr(e.X)
		e.Y = rw.expr(e.Y)
	case *syntax.DotExpr:
		e.X = rw.expr(e.X)
	}
	return e
}

// expr rewrites an expression evaluated for its value.
func (rw *rewriter) expr(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.BinaryExpr:
		e.X, e.Y = rw.expr(e.X), rw.expr(e.Y)
		if name, ok := opNames[e.Op]; ok {
			return call("__tf_op_"+name, e.OpPos, e.X, e.Y)
		}
	case *syntax.UnaryExpr:
		if e.X != nil {
			e.X = rw.expr(e.X)
		}
	case *syntax.CallExpr:
		e.Fn = rw.expr(e.Fn)
		for i, a := range e.Args {
			switch a := a.(type) {
			case *syntax.BinaryExpr: // name=value
				if a.Op == syntax.EQ {
					a.Y = rw.expr(a.Y)
					continue
				}
			case *syntax.UnaryExpr: // *args, **kwargs
				if a.Op == syntax.STAR || a.Op == syntax.STARSTAR {
					a.X = rw.expr(a.X)
					continue
				}
			}
			e.Args[i] = rw.expr(a)
		}
	case *syntax.Comprehension:
		for _, c := range e.Clauses {
			switch c := c.(type) {
			case *syntax.ForClause:
				c.Vars = rw.target(c.Vars)
				c.X = rw.expr(c.X)
			case *syntax.IfClause:
				c.Cond = rw.expr(c.Cond)
			}
		}
		e.Body = rw.expr(e.Body)
	case *syntax.CondExpr:
		e.Cond, e.True, e.False = rw.expr(e.Cond), rw.expr(e.True), rw.expr(e.False)
	case *syntax.DictExpr:
		for _, x := range e.List {
			rw.expr(x)
		}
	case *syntax.DictEntry:
		e.Key, e.Value = rw.expr(e.Key), rw.expr(e.Value)
	case *syntax.DotExpr:
		x := rw.expr(e.X)
		return call("__tf_attr", e.Dot, x, &syntax.Literal{Token: syntax.STRING, TokenPos: e.NamePos,
			Raw: fmt.Sprintf("%q", e.Name.Name), Value: e.Name.Name})
	case *syntax.IndexExpr:
		e.X, e.Y = rw.expr(e.X), rw.expr(e.Y)
	case *syntax.LambdaExpr:
		rw.params(e.Params)
		e.Body = rw.expr(e.Body)
	case *syntax.ListExpr:
		for i, x := range e.List {
			e.List[i] = rw.expr(x)
		}
	case *syntax.TupleExpr:
		for i, x := range e.List {
			e.List[i] = rw.expr(x)
		}
	case *syntax.ParenExpr:
		e.X = rw.expr(e.X)
	case *syntax.SliceExpr:
		none := func(x syntax.Expr) syntax.Expr {
			if x == nil {
				return &syntax.Ident{NamePos: e.Lbrack, Name: "None"}
			}
			return rw.expr(x)
		}
		return call("__tf_slice", e.Lbrack, rw.expr(e.X), none(e.Lo), none(e.Hi), none(e.Step))
	}
	return e
}

// call is the syntax of fn(args...) at pos: errors of the call point there.
func call(fn string, pos syntax.Position, args ...syntax.Expr) *syntax.CallExpr {
	return &syntax.CallExpr{Fn: &syntax.Ident{NamePos: pos, Name: fn}, Lparen: pos, Args: args, Rparen: pos}
}

// loadCopy copies an augmented assignment's target as an expression to read
// it again: only names, attributes and indexes without calls, so that reading
// it twice cannot repeat a side effect.
func loadCopy(e syntax.Expr) (syntax.Expr, error) {
	switch e := e.(type) {
	case *syntax.Ident:
		return &syntax.Ident{NamePos: e.NamePos, Name: e.Name}, nil
	case *syntax.Literal:
		c := *e
		return &c, nil
	case *syntax.ParenExpr:
		x, err := loadCopy(e.X)
		return &syntax.ParenExpr{Lparen: e.Lparen, X: x, Rparen: e.Rparen}, err
	case *syntax.DotExpr:
		x, err := loadCopy(e.X)
		return &syntax.DotExpr{X: x, Dot: e.Dot, NamePos: e.NamePos, Name: &syntax.Ident{NamePos: e.Name.NamePos, Name: e.Name.Name}}, err
	case *syntax.IndexExpr:
		x, err := loadCopy(e.X)
		if err != nil {
			return nil, err
		}
		y, err := loadCopy(e.Y)
		return &syntax.IndexExpr{X: x, Lbrack: e.Lbrack, Y: y, Rbrack: e.Rbrack}, err
	case *syntax.UnaryExpr:
		if e.Op == syntax.MINUS && e.X != nil {
			x, err := loadCopy(e.X)
			return &syntax.UnaryExpr{OpPos: e.OpPos, Op: e.Op, X: x}, err
		}
	}
	return nil, fmt.Errorf("an augmented assignment (x += y) needs a target of names, attributes and indexes; assign the computed part to a variable first")
}
