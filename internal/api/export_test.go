package api

// ConstraintVocabBuilt reports whether the served model's grammar
// vocabulary exists yet (tests only; call it with no request running).
func (s *Server) ConstraintVocabBuilt() bool {
	m := s.model.Load()
	return m != nil && m.state != nil && m.state.vocab != nil
}
