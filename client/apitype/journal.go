package apitype

// Journal message IDs. rdmad tags the log lines an operator searches for
// with a MESSAGE_ID journal field, so that
//
//	journalctl -u rdmad MESSAGE_ID=<id>
//
// finds every one of them whatever the wording, and `journalctl -x` adds
// the explanation and the fix from rdmad's message catalog
// (packaging/rdmad.catalog, installed to /usr/lib/systemd/catalog/). Each
// ID is 128 random bits in lower-case hex, as systemd-id128(1) makes them;
// an ID never changes meaning and is never reused. A log call passes one
// as the attribute MessageIDKey:
//
//	log.Warn("peer down", apitype.MessageIDKey, apitype.MsgPeerDown, "peer", name)
//
// Outside the journal the ID is one more key=value on the line.
const MessageIDKey = "MESSAGE_ID"

const (
	// MsgConfigRejected: a configuration file has an error; the last good
	// configuration stays in force. Fields: WHY, ERR, GENERATION.
	MsgConfigRejected = "eae618b701a048f7a6085724f74df484"
	// MsgDriftDetected: a managed setting differs from its policy, which
	// is in observe mode (nothing is changed). Fields: POLICY, KIND,
	// OBJECT, DESIRED, ACTUAL.
	MsgDriftDetected = "8e12410ae95844e1bf1a92167add99c5"
	// MsgDriftApplied: a managed setting differed from its policy and
	// rdmad set it. Fields: POLICY, KIND, OBJECT, FROM, DESIRED.
	MsgDriftApplied = "d85570bbd4674a0f9f67ab4fb8539956"
	// MsgDeviceAdded: an RDMA device appeared. Fields: DEVICE, PORTS.
	MsgDeviceAdded = "07003520c0dd454ca64ab291b5927f8a"
	// MsgDeviceRemoved: an RDMA device went away. Fields: DEVICE.
	MsgDeviceRemoved = "6d0364367b0646728f61aad061482b39"
	// MsgPortState: an RDMA port's state or physical state changed.
	// Fields: DEVICE, PORT, NETDEV, FROM, TO.
	MsgPortState = "99bec5269a764fabaa4284d144169871"
	// MsgPeerDown, MsgPeerUp, MsgPeerDegraded: a probed peer's state
	// changed. Fields: PEER, GROUP, FROM, TO, REASON.
	MsgPeerDown     = "e6deabb6dec44faa91c02a49993c7178"
	MsgPeerUp       = "60ec234a7c604113aa55685f895c587e"
	MsgPeerDegraded = "a891c573c00e4d8bba06892ab1d7b658"
	// MsgLocalFault: every peer is down from one local probe port: the
	// port, its cable or switch port, or this host is the likelier
	// fault. Fields: PORT, REASON.
	MsgLocalFault = "2682f224d2c3418682dbba510ea3b4d2"
	// MsgHealthProblem, MsgHealthOK: a condition of the health verdict
	// (docs/HEALTH.md) became a problem or unknown, or ok again. Fields:
	// CONDITION, STATUS, REASON, OBJECTS, DETAIL.
	MsgHealthProblem = "33c22d9b8b7a4383a04016564da69415"
	MsgHealthOK      = "86987824b85045d59e06cc76b32e6e71"
	// MsgPortFlapping: a port went down too often within the flap window
	// ([health] flap_downs, flap_window). Fields: PORT, DOWNS, WINDOW.
	MsgPortFlapping = "260c6d4f2f37462587436606e2e134ff"
	// MsgComponentProblem, MsgComponentOK: one of rdmad's components (the
	// configuration, verbs, the peer probes, D-Bus, ...; see
	// status.components) failed, is unavailable on this node or changed
	// its reason, or works again. Fields: COMPONENT, FROM, TO, REASON
	// (and WAS, the problem that ended, for MsgComponentOK).
	MsgComponentProblem = "a651e31b57674ed28e1df3d11fb95907"
	MsgComponentOK      = "e05d530f3c9b47d8849551ad7ae42e6c"
)
