package gateway

// ReplicasForTest reports how many replicas serve a tool version.
func ReplicasForTest(g *Gateway, id string) int {
	rt := g.reg.Current().Route(id)
	if rt == nil {
		return 0
	}
	return rt.Replicas()
}

// ResolveCacheLenForTest reports how many tool references the current registry
// view has cached.
func ResolveCacheLenForTest(g *Gateway) int { return g.reg.Current().ResolvedLen() }

// WarmForTest reports whether the registry's first warm-up has ended; true
// for a gateway without NATS, which has none.
func WarmForTest(g *Gateway) bool {
	if g.cfg.NATSURL == "" {
		return true
	}
	select {
	case <-g.reg.Warm():
		return true
	default:
		return false
	}
}
