package ethtool

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/internal/testenv"
)

// TestConstantsMatchKernelHeaders compiles testdata/consts.c against the
// installed uapi headers (linux-libc-dev: <linux/ethtool_netlink.h>,
// <linux/ethtool.h>, <linux/sockios.h>) and compares what it prints with
// the constants of consts.go. RDMAD_UAPI_INCLUDE may name an include
// directory searched first, to check against a newer header.
func TestConstantsMatchKernelHeaders(t *testing.T) {
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
	header := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad line %q from consts.c", line)
		}
		header[line[:i]] = line[i+1:]
	}
	if got := header["ETHTOOL_GENL_NAME"]; got != genlName {
		t.Errorf("ETHTOOL_GENL_NAME: header says %q, Go has %q", got, genlName)
	}
	for name, want := range map[string]int{
		"ETHTOOL_GENL_VERSION":                          genlVersion,
		"ETHTOOL_MSG_PAUSE_GET":                         msgPauseGet,
		"ETHTOOL_MSG_PAUSE_GET_REPLY":                   msgPauseGetReply,
		"ETHTOOL_A_HEADER_DEV_INDEX":                    attrHeaderDevIndex,
		"ETHTOOL_A_HEADER_DEV_NAME":                     attrHeaderDevName,
		"ETHTOOL_A_HEADER_FLAGS":                        attrHeaderFlags,
		"ETHTOOL_FLAG_STATS":                            flagStats,
		"ETHTOOL_A_PAUSE_HEADER":                        attrPauseHeader,
		"ETHTOOL_A_PAUSE_AUTONEG":                       attrPauseAutoneg,
		"ETHTOOL_A_PAUSE_RX":                            attrPauseRX,
		"ETHTOOL_A_PAUSE_TX":                            attrPauseTX,
		"ETHTOOL_A_PAUSE_STATS":                         attrPauseStats,
		"ETHTOOL_A_PAUSE_STAT_PAD":                      attrPauseStatPad,
		"ETHTOOL_A_PAUSE_STAT_TX_FRAMES":                attrPauseStatTXFrames,
		"ETHTOOL_A_PAUSE_STAT_RX_FRAMES":                attrPauseStatRXFrames,
		"SIOCETHTOOL":                                   siocEthtool,
		"ETHTOOL_GSSET_INFO":                            cmdGSSetInfo,
		"ETHTOOL_GSTRINGS":                              cmdGStrings,
		"ETHTOOL_GSTATS":                                cmdGStats,
		"ETH_SS_STATS":                                  ssStats,
		"ETH_GSTRING_LEN":                               gstringLen,
		"offsetof(struct ethtool_sset_info, sset_mask)": ssetInfoMaskOff,
		"offsetof(struct ethtool_sset_info, data)":      ssetInfoDataOff,
		"offsetof(struct ethtool_gstrings, len)":        gstringsLenOff,
		"offsetof(struct ethtool_gstrings, data)":       gstringsDataOff,
		"offsetof(struct ethtool_stats, n_stats)":       statsNOff,
		"offsetof(struct ethtool_stats, data)":          statsDataOff,
		"IFNAMSIZ":                                      ifNameSize,
		"offsetof(struct ifreq, ifr_data)":              ifreqDataOff,
	} {
		s, ok := header[name]
		if !ok {
			t.Errorf("%s: not printed by consts.c", name)
			continue
		}
		if got, err := strconv.Atoi(s); err != nil || got != want {
			t.Errorf("%s: header says %s, Go has %d", name, s, want)
		}
	}
	// The ioctl passes a buffer of ifreqSize bytes: at least struct ifreq.
	if got, _ := strconv.Atoi(header["sizeof(struct ifreq)"]); got == 0 || got > ifreqSize {
		t.Errorf("sizeof(struct ifreq) is %s, Go passes %d bytes", header["sizeof(struct ifreq)"], ifreqSize)
	}
}
