package rdmares

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// headerEnums returns the value of every enumerator of the C header text,
// computed as C does: from 0, or the explicit value, each next one plus 1.
// It knows the expressions rdma_netlink.h uses: integer literals, "1 << n"
// (in parentheses or not) and earlier enumerators. An enumerator it cannot
// compute, and those after it in its enum, are left out.
func headerEnums(t *testing.T, text string) map[string]int {
	t.Helper()
	text = regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(text, " ")
	text = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(text, " ")
	vals := map[string]int{}
	for _, m := range regexp.MustCompile(`(?s)\benum\b[^{;]*\{(.*?)\}`).FindAllStringSubmatch(text, -1) {
		next, known := 0, true
		for _, item := range strings.Split(m[1], ",") {
			name, expr, hasExpr := strings.Cut(strings.TrimSpace(item), "=")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if hasExpr {
				next, known = evalEnum(strings.TrimSpace(expr), vals)
			}
			if known {
				vals[name] = next
			}
			next++
		}
	}
	return vals
}

func evalEnum(expr string, vals map[string]int) (int, bool) {
	expr = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(expr, "("), ")"))
	if l, r, ok := strings.Cut(expr, "<<"); ok {
		a, ok1 := evalEnum(l, vals)
		b, ok2 := evalEnum(r, vals)
		return a << b, ok1 && ok2
	}
	if v, err := strconv.ParseInt(expr, 0, 64); err == nil {
		return int(v), true
	}
	v, ok := vals[expr]
	return v, ok
}

// checkHeader compares every constant of consts.go with the header text.
func checkHeader(t *testing.T, name, text string) {
	enums := headerEnums(t, text)
	if len(enums) < 100 {
		t.Fatalf("%s: parsed only %d enumerators", name, len(enums))
	}
	for hname, want := range map[string]int{
		"RDMA_NL_NLDEV":                          clientNLDEV,
		"RDMA_NLDEV_CMD_RES_GET":                 cmdResGet,
		"RDMA_NLDEV_CMD_RES_QP_GET":              cmdResQPGet,
		"RDMA_NLDEV_CMD_RES_CQ_GET":              cmdResCQGet,
		"RDMA_NLDEV_CMD_RES_MR_GET":              cmdResMRGet,
		"RDMA_NLDEV_CMD_RES_PD_GET":              cmdResPDGet,
		"RDMA_NLDEV_ATTR_DEV_INDEX":              attrDevIndex,
		"RDMA_NLDEV_ATTR_DEV_NAME":               attrDevName,
		"RDMA_NLDEV_ATTR_RES_SUMMARY":            attrResSummary,
		"RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY":      attrResSummaryEntry,
		"RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME": attrResSummaryName,
		"RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR": attrResSummaryCurr,
		"RDMA_NLDEV_ATTR_RES_QP":                 attrResQP,
		"RDMA_NLDEV_ATTR_RES_QP_ENTRY":           attrResQPEntry,
		"RDMA_NLDEV_ATTR_RES_LQPN":               attrResLQPN,
		"RDMA_NLDEV_ATTR_RES_PID":                attrResPID,
		"RDMA_NLDEV_ATTR_RES_KERN_NAME":          attrResKernName,
		"RDMA_NLDEV_ATTR_RES_CQ":                 attrResCQ,
		"RDMA_NLDEV_ATTR_RES_CQ_ENTRY":           attrResCQEntry,
		"RDMA_NLDEV_ATTR_RES_MR":                 attrResMR,
		"RDMA_NLDEV_ATTR_RES_MR_ENTRY":           attrResMREntry,
		"RDMA_NLDEV_ATTR_RES_MRLEN":              attrResMRLen,
		"RDMA_NLDEV_ATTR_RES_PD":                 attrResPD,
		"RDMA_NLDEV_ATTR_RES_PD_ENTRY":           attrResPDEntry,
		"RDMA_NLDEV_ATTR_RES_PDN":                attrResPDN,
		"RDMA_NLDEV_ATTR_RES_CQN":                attrResCQN,
		"RDMA_NLDEV_ATTR_RES_MRN":                attrResMRN,
		"RDMA_NLDEV_ATTR_PAD":                    attrPad,
	} {
		got, ok := enums[hname]
		switch {
		case !ok:
			t.Errorf("%s: %s not found", name, hname)
		case got != want:
			t.Errorf("%s: %s is %d, Go has %d", name, hname, got, want)
		}
	}
	// The message type macro, RDMA_NL_GET_TYPE(client, op), and what Go
	// computes from it for each dump.
	if !regexp.MustCompile(`#define\s+RDMA_NL_GET_TYPE\(client,\s*op\)\s+\(\(client\s*<<\s*10\)\s*\+\s*op\)`).MatchString(text) {
		t.Errorf("%s: RDMA_NL_GET_TYPE is no longer ((client << 10) + op)", name)
	}
	for op, want := range map[int]uint16{cmdResGet: 0x1409, cmdResQPGet: 0x140a, cmdResCQGet: 0x140c, cmdResMRGet: 0x140d, cmdResPDGet: 0x140e} {
		if got := msgType(enums["RDMA_NL_NLDEV"], op); got != want {
			t.Errorf("RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, %d) = %#x, want %#x", op, got, want)
		}
	}
}

// TestConstantsMatchHeader checks consts.go against the copy of Linux
// 6.1's <rdma/rdma_netlink.h> in testdata (the test bed's kernel), and
// against the installed header (linux-libc-dev) when there is one, which
// may be newer: the ABI only grows, so both must agree.
func TestConstantsMatchHeader(t *testing.T) {
	b, err := os.ReadFile("testdata/rdma_netlink.h")
	if err != nil {
		t.Fatal(err)
	}
	checkHeader(t, "testdata/rdma_netlink.h", string(b))

	installed := "/usr/include/rdma/rdma_netlink.h"
	if dir := os.Getenv("RDMAD_UAPI_INCLUDE"); dir != "" {
		installed = dir + "/rdma/rdma_netlink.h"
	}
	if b, err := os.ReadFile(installed); err == nil {
		checkHeader(t, installed, string(b))
	} else {
		t.Logf("%v: only the copy in testdata is checked (install linux-libc-dev to check the system's too)", err)
	}

	// From <linux/netlink.h>, as x/sys/unix carries it.
	if netlinkRDMA != unix.NETLINK_RDMA {
		t.Errorf("NETLINK_RDMA is %d, Go has %d", unix.NETLINK_RDMA, netlinkRDMA)
	}
}

// TestHeaderParser: the parser computes C's values on the forms the
// header uses, so that the check above compares real values.
func TestHeaderParser(t *testing.T) {
	text := `
enum x {
	A, /* 0 */
	B = 5, // explicit
	C,
	D = (1 << 3),
	E = D,
	F
};`
	got := headerEnums(t, text)
	for name, want := range map[string]int{"A": 0, "B": 5, "C": 6, "D": 8, "E": 8, "F": 9} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}
}
