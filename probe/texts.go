package probe

// texts keeps the state machine's reasons that come back again and
// again: a lossy path flips between up and degraded every few probes with
// the same figures ("loss 2.0% over the last 100 probes ..."), a path on
// several flows goes through the same few flows reasons as its flows turn
// lossy and clean, and its peer's reason is the port and that text. Each
// would be formatted (and allocated) again at every flip; the cache gives
// back the text made the last time. It is looked in only when a reason
// changes (a path keeps its current one), holds textSlots texts of each
// kind, the oldest replaced first, and never grows: texts for figures
// that do not come back are made again. Run's goroutine only.
type texts struct {
	bad   [textSlots]badText
	port  [textSlots]portText
	flow  [textSlots]flowsText
	nextB int // the slot each kind replaces next
	nextP int
	nextF int
}

// textSlots is the texts kept of each kind: more than the distinct
// reasons of a fleet's few lossy paths go through.
const textSlots = 64

type badText struct {
	k    badKey
	text string
}

type portText struct {
	local, reason, text string
}

type flowsText struct {
	k     flowsKey
	n     int    // the path's flows
	sport uint16 // the worst flow's UDP source port
	text  string
}

func newTexts() *texts { return &texts{} }

// badReason returns t.bad(ws), the text of ws's key (k) when the cache
// holds it. tx may be nil: no cache.
func (tx *texts) badReason(k badKey, ws winStats, t Thresholds) string {
	if tx == nil {
		return t.bad(ws)
	}
	for i := range tx.bad {
		if s := &tx.bad[i]; s.k == k && s.text != "" {
			return s.text
		}
	}
	r := t.bad(ws)
	if r != "" {
		tx.bad[tx.nextB] = badText{k: k, text: r}
		tx.nextB = (tx.nextB + 1) % textSlots
	}
	return r
}

// portReason returns "local: reason" (see portReason), from the cache
// when prev is not that text already and the cache holds it. tx may be
// nil: no cache.
func (tx *texts) portReason(prev, local, reason string) string {
	if tx == nil || isPortReason(prev, local, reason) {
		return portReason(prev, local, reason)
	}
	for i := range tx.port {
		if s := &tx.port[i]; s.text != "" && s.local == local && s.reason == reason {
			return s.text
		}
	}
	r := portReason(prev, local, reason)
	tx.port[tx.nextP] = portText{local: local, reason: reason, text: r}
	tx.nextP = (tx.nextP + 1) % textSlots
	return r
}

// flows returns the text of a path's flows reason (flowsReason) for key
// k, n flows and the worst one's source port sport; "" when the cache
// does not hold it. tx may be nil.
func (tx *texts) flows(k flowsKey, n int, sport uint16) string {
	if tx == nil {
		return ""
	}
	for i := range tx.flow {
		if s := &tx.flow[i]; s.text != "" && s.k == k && s.n == n && s.sport == sport {
			return s.text
		}
	}
	return ""
}

// keepFlows keeps text as the flows reason of k, n and sport.
func (tx *texts) keepFlows(k flowsKey, n int, sport uint16, text string) {
	if tx != nil {
		tx.flow[tx.nextF] = flowsText{k: k, n: n, sport: sport, text: text}
		tx.nextF = (tx.nextF + 1) % textSlots
	}
}
