package nodedrain

// EvCordonFound says the node informer shows edgedrain's cordon record on the node (its
// CordonAnnotation) while the drain holds no cordon: a cordon whose client gave up (a timeout, a
// cancelled drain) may land at the server after the drain ended and its uncordon found nothing to
// undo. It comes again at every admission pass while it is so.
type EvCordonFound struct{}

func (EvCordonFound) event() {}

// cordonFound uncordons a node carrying edgedrain's record while its drain is idle or queued,
// nothing under way (a drain cordoning it, or undoing its cordon, answers for it itself).
func (s *stepper) cordonFound() {
	st := s.d.Status.Status
	if (st != StatusNotRequested && st != StatusRequested) || s.d.Status.CordonedByUs || s.d.Waiting != OpNone ||
		s.d.RetryOp != OpNone || s.d.Returning() || s.d.Decommissioned() {
		return
	}
	s.d.Status.CordonedByUs = true
	s.note("edgedrain's cordon record is on the node though no drain holds its cordon (a cordon whose client gave up "+
		"landed late): uncordoning the node", s.d.Status.Blockers)
	s.start(OpUncordon, 0)
}
