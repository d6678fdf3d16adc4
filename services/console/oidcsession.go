package console

// Session store operations the OIDC sign-in needs beyond session.go's: it
// renews a session's token in place and ends a session by id.

// byID returns a copy of the live session id, or nil.
func (s *sessions) byID(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss == nil || s.now().After(ss.expires) {
		return nil
	}
	cp := *ss
	return &cp
}

// update changes the live session id with f and returns a copy, or nil
// when it has ended.
func (s *sessions) update(id string, f func(*session)) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss == nil || s.now().After(ss.expires) {
		return nil
	}
	f(ss)
	cp := *ss
	return &cp
}

// drop ends the session id (its cookie then names nothing).
func (s *sessions) drop(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
