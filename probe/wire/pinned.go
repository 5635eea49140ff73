package wire

// The numbers below are on the wire: peers of every rdmad version read
// them, so none may ever change. Each line fails to compile ("index out of
// bounds") when its constant is renumbered; a new value gets a new name and
// a new line, never an old number.
var (
	_ = [1]struct{}{}[Version1-1]
	_ = [1]struct{}{}[Version2-2]
	_ = [1]struct{}{}[TypeQuery-1]
	_ = [1]struct{}{}[TypeAnswer-2]
	_ = [1]struct{}{}[TypeBWRequest-3]
	_ = [1]struct{}{}[TypeBWAnswer-4]
	_ = [1]struct{}{}[TypeBWDone-5]
	_ = [1]struct{}{}[FlagAuthenticated-0x01]
	_ = [1]struct{}{}[ExtCritical-0x8000]
	_ = [1]struct{}{}[ExtFingerprint-0x0001]
	_ = [1]struct{}{}[ExtPadding-0x0002]
	_ = [1]struct{}{}[ExtBandwidth-0x8003]
	_ = [1]struct{}{}[BWWrite-1]
	_ = [1]struct{}{}[BWRead-2]
	_ = [1]struct{}{}[BWSend-3]
	_ = [1]struct{}{}[BWOK-0]
	_ = [1]struct{}{}[BWDisabled-1]
	_ = [1]struct{}{}[BWBusy-2]
	_ = [1]struct{}{}[BWBadRequest-3]
	_ = [1]struct{}{}[BWUnavailable-4]
	_ = [1]struct{}{}[Size-64]
	_ = [1]struct{}{}[DefaultPort-18516]
)
