package nicq

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/internal/testenv"
)

func TestConstantsMatchKernelHeader(t *testing.T) {
	gcc := testenv.Tool(t, "gcc", "apt-get install gcc linux-libc-dev: the header check compiles against the kernel's headers")
	var args []string
	if dir := os.Getenv("RDMAD_UAPI_INCLUDE"); dir != "" {
		args = append(args, "-I", dir)
	} else {
		testenv.File(t, "/usr/include/linux/ethtool_netlink.h", "apt-get install linux-libc-dev")
	}
	bin := filepath.Join(t.TempDir(), "consts")
	args = append(args, "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "consts.c"))
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run consts: %v", err)
	}
	header := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, v, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("bad line %q from consts.c", line)
		}
		header[name] = n
	}
	for name, want := range map[string]int{
		"ETHTOOL_MSG_RINGS_GET":              msgRingsGet,
		"ETHTOOL_MSG_RINGS_SET":              msgRingsSet,
		"ETHTOOL_MSG_CHANNELS_GET":           msgChannelsGet,
		"ETHTOOL_MSG_CHANNELS_SET":           msgChannelsSet,
		"ETHTOOL_MSG_COALESCE_GET":           msgCoalesceGet,
		"ETHTOOL_MSG_COALESCE_SET":           msgCoalesceSet,
		"ETHTOOL_MSG_RINGS_GET_REPLY":        msgRingsGetReply,
		"ETHTOOL_MSG_CHANNELS_GET_REPLY":     msgChannelsGetReply,
		"ETHTOOL_MSG_COALESCE_GET_REPLY":     msgCoalesceGetReply,
		"ETHTOOL_A_RINGS_HEADER":             attrHeader,
		"ETHTOOL_A_CHANNELS_HEADER":          attrHeader,
		"ETHTOOL_A_COALESCE_HEADER":          attrHeader,
		"ETHTOOL_A_HEADER_DEV_NAME":          attrHeaderDevName,
		"ETHTOOL_A_RINGS_RX_MAX":             attrRingsRXMax,
		"ETHTOOL_A_RINGS_TX_MAX":             attrRingsTXMax,
		"ETHTOOL_A_RINGS_RX":                 attrRingsRX,
		"ETHTOOL_A_RINGS_TX":                 attrRingsTX,
		"ETHTOOL_A_CHANNELS_RX_MAX":          attrChannelsRXMax,
		"ETHTOOL_A_CHANNELS_TX_MAX":          attrChannelsTXMax,
		"ETHTOOL_A_CHANNELS_COMBINED_MAX":    attrChannelsCombinedMax,
		"ETHTOOL_A_CHANNELS_RX_COUNT":        attrChannelsRX,
		"ETHTOOL_A_CHANNELS_TX_COUNT":        attrChannelsTX,
		"ETHTOOL_A_CHANNELS_COMBINED_COUNT":  attrChannelsCombined,
		"ETHTOOL_A_COALESCE_RX_USECS":        attrCoalesceRXUsecs,
		"ETHTOOL_A_COALESCE_TX_USECS":        attrCoalesceTXUsecs,
		"ETHTOOL_A_COALESCE_USE_ADAPTIVE_RX": attrCoalesceAdaptiveRX,
		"ETHTOOL_A_COALESCE_USE_ADAPTIVE_TX": attrCoalesceAdaptiveTX,
	} {
		got, ok := header[name]
		if !ok {
			t.Errorf("%s: not printed by consts.c", name)
		} else if got != want {
			t.Errorf("%s: header says %d, Go has %d", name, got, want)
		}
	}
}
