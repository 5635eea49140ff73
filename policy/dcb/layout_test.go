package dcb

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/internal/testenv"
)

// kernelABI compiles testdata/layout.c against the installed uapi header
// (<linux/dcbnl.h>, from linux-libc-dev) and returns what it printed.
// RDMAD_UAPI_INCLUDE may name an extra include directory searched first,
// to check against a newer header than the system's.
func kernelABI(t *testing.T) map[string]string {
	t.Helper()
	gcc := testenv.Tool(t, "gcc", "apt-get install gcc linux-libc-dev: the uapi layout check compiles against the kernel's headers")
	var args []string
	if dir := os.Getenv("RDMAD_UAPI_INCLUDE"); dir != "" {
		args = append(args, "-I", dir)
	} else {
		testenv.File(t, "/usr/include/linux/dcbnl.h", "apt-get install linux-libc-dev")
	}
	bin := filepath.Join(t.TempDir(), "layout")
	args = append(args, "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "layout.c"))
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run layout: %v", err)
	}
	abi := make(map[string]string)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad line %q from layout", line)
		}
		abi[line[:i]] = line[i+1:]
	}
	return abi
}

func TestLayoutMatchesKernelHeader(t *testing.T) {
	abi := kernelABI(t)

	t.Run("constants", func(t *testing.T) {
		want := map[string]int{
			"RTM_GETDCB":                              rtmGetDCB,
			"RTM_SETDCB":                              rtmSetDCB,
			"AF_UNSPEC":                               0,
			"DCB_CMD_GSTATE":                          cmdGState,
			"DCB_CMD_IEEE_SET":                        cmdIEEESet,
			"DCB_CMD_IEEE_GET":                        cmdIEEEGet,
			"DCB_CMD_IEEE_DEL":                        cmdIEEEDel,
			"DCB_ATTR_IFNAME":                         attrIfname,
			"DCB_ATTR_STATE":                          attrState,
			"DCB_ATTR_IEEE":                           attrIEEE,
			"DCB_ATTR_DCBX":                           attrDCBX,
			"DCB_ATTR_IEEE_ETS":                       attrIEEEETS,
			"DCB_ATTR_IEEE_PFC":                       attrIEEEPFC,
			"DCB_ATTR_IEEE_APP_TABLE":                 attrIEEEAppTable,
			"DCB_ATTR_IEEE_PEER_ETS":                  attrIEEEPeerETS,
			"DCB_ATTR_IEEE_PEER_PFC":                  attrIEEEPeerPFC,
			"DCB_ATTR_IEEE_PEER_APP":                  attrIEEEPeerApp,
			"DCB_ATTR_IEEE_MAXRATE":                   attrIEEEMaxrate,
			"DCB_ATTR_DCB_BUFFER":                     attrDCBBuffer,
			"DCB_ATTR_IEEE_APP_UNSPEC":                attrIEEEAppUnspec,
			"DCB_ATTR_IEEE_APP":                       attrIEEEApp,
			"IEEE_8021QAZ_MAX_TCS":                    maxTCs,
			"IEEE_8021QAZ_APP_SEL_ETHERTYPE":          int(SelectorEthertype),
			"IEEE_8021QAZ_APP_SEL_STREAM":             int(SelectorStream),
			"IEEE_8021QAZ_APP_SEL_DGRAM":              int(SelectorDgram),
			"IEEE_8021QAZ_APP_SEL_ANY":                int(SelectorAny),
			"IEEE_8021QAZ_APP_SEL_DSCP":               int(SelectorDSCP),
			"IEEE_8021QAZ_TSA_STRICT":                 int(TSAStrict),
			"IEEE_8021QAZ_TSA_CB_SHAPER":              int(TSACBShaper),
			"IEEE_8021QAZ_TSA_ETS":                    int(TSAETS),
			"IEEE_8021QAZ_TSA_VENDOR":                 int(TSAVendor),
			"DCB_CAP_DCBX_HOST":                       int(DCBXHost),
			"DCB_CAP_DCBX_LLD_MANAGED":                int(DCBXLLDManaged),
			"DCB_CAP_DCBX_VER_CEE":                    int(DCBXVerCEE),
			"DCB_CAP_DCBX_VER_IEEE":                   int(DCBXVerIEEE),
			"DCB_CAP_DCBX_STATIC":                     int(DCBXStatic),
			"sizeof(struct dcbmsg)":                   sizeofDCBMsg,
			"offsetof(struct dcbmsg, cmd)":            1,
			"sizeof(struct dcb_app)":                  sizeofDCBApp,
			"offsetof(struct dcb_app, priority)":      1,
			"offsetof(struct dcb_app, protocol)":      2,
			"sizeof(struct ieee_pfc)":                 sizeofIEEEPFC,
			"offsetof(struct ieee_pfc, pfc_en)":       1,
			"offsetof(struct ieee_pfc, mbc)":          2,
			"offsetof(struct ieee_pfc, delay)":        offsetofPFCDelay,
			"offsetof(struct ieee_pfc, requests)":     offsetofPFCReqs,
			"offsetof(struct ieee_pfc, indications)":  offsetofPFCInds,
			"sizeof(struct ieee_ets)":                 sizeofIEEEETS,
			"offsetof(struct ieee_ets, tc_tx_bw)":     offsetofETSTCTxBW,
			"offsetof(struct ieee_ets, tc_rx_bw)":     offsetofETSTCRxBW,
			"offsetof(struct ieee_ets, tc_tsa)":       offsetofETSTCTSA,
			"offsetof(struct ieee_ets, prio_tc)":      offsetofETSPrioTC,
			"offsetof(struct ieee_ets, tc_reco_bw)":   offsetofETSRecoBW,
			"offsetof(struct ieee_ets, tc_reco_tsa)":  offsetofETSRecoTSA,
			"offsetof(struct ieee_ets, reco_prio_tc)": offsetofETSRecoPTC,
		}
		compareInts(t, abi, want)
	})

	t.Run("trust table constants", func(t *testing.T) {
		if _, ok := abi["DCB_APP_SEL_PCP"]; !ok {
			t.Skip("this <linux/dcbnl.h> predates Linux 6.3 and has no APP trust table; " +
				"set RDMAD_UAPI_INCLUDE to a newer linux-libc-dev's usr/include to check these")
		}
		compareInts(t, abi, map[string]int{
			"DCB_APP_SEL_PCP":              int(SelectorPCP),
			"DCB_ATTR_DCB_APP_TRUST_TABLE": attrDCBTrustTable,
			"DCB_ATTR_DCB_REWR_TABLE":      attrDCBRewrTable,
			"DCB_ATTR_DCB_APP":             attrDCBApp,
		})
	})

	// The C program fills each struct with known values; the Go encoders
	// must produce, and the decoders accept, exactly the bytes C has in
	// memory (native byte order, padding included).
	t.Run("struct bytes", func(t *testing.T) {
		cbytes := func(name string) []byte {
			t.Helper()
			b, err := hex.DecodeString(abi["bytes."+name])
			if err != nil || len(b) == 0 {
				t.Fatalf("bytes.%s from layout: %q (%v)", name, abi["bytes."+name], err)
			}
			return b
		}

		if diff := cmp.Diff(cbytes("dcbmsg"), dcbMsg(cmdIEEEGet)); diff != "" {
			t.Errorf("struct dcbmsg (-C +Go):\n%s", diff)
		}

		app := App{Selector: SelectorDSCP, Priority: 3, Protocol: 0x1a2b}
		if diff := cmp.Diff(cbytes("dcb_app"), app.marshal()); diff != "" {
			t.Errorf("struct dcb_app (-C +Go):\n%s", diff)
		}
		if got, err := unmarshalApp(cbytes("dcb_app")); err != nil || got != app {
			t.Errorf("unmarshalApp(C bytes) = %+v, %v; want %+v", got, err, app)
		}

		pfc := PFC{Cap: 8, Enabled: 0x28, MBC: 1, Delay: 0x1234}
		for i := range maxTCs {
			pfc.Requests[i] = 0x0102030405060700 + uint64(i)
			pfc.Indications[i] = 0x1100000000000000 + uint64(i)
		}
		if diff := cmp.Diff(cbytes("ieee_pfc"), pfc.marshal()); diff != "" {
			t.Errorf("struct ieee_pfc (-C +Go):\n%s", diff)
		}
		gotPFC, err := unmarshalPFC(cbytes("ieee_pfc"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(pfc, *gotPFC); diff != "" {
			t.Errorf("unmarshalPFC(C bytes) (-want +got):\n%s", diff)
		}

		// Byte i of the C struct holds i+1, so each field's first element
		// names its offset.
		gotETS, err := unmarshalETS(cbytes("ieee_ets"))
		if err != nil {
			t.Fatal(err)
		}
		var wantETS ETS
		wantETS.Willing, wantETS.Cap, wantETS.CBS = 1, 2, 3
		for i := range uint8(maxTCs) {
			wantETS.TCTxBW[i] = 4 + i
			wantETS.TCRxBW[i] = 12 + i
			wantETS.TCTSA[i] = 20 + i
			wantETS.PrioTC[i] = 28 + i
			wantETS.TCRecoBW[i] = 36 + i
			wantETS.TCRecoTSA[i] = 44 + i
			wantETS.RecoPrioTC[i] = 52 + i
		}
		if diff := cmp.Diff(wantETS, *gotETS); diff != "" {
			t.Errorf("unmarshalETS(C bytes) (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(cbytes("ieee_ets"), wantETS.marshal()); diff != "" {
			t.Errorf("struct ieee_ets (-C +Go):\n%s", diff)
		}

		// A whole DCB_CMD_IEEE_GET reply carrying C's structs, as
		// dcbnl_ieee_fill nests them, decodes to the same values: what
		// rdmad reports of a port (rdmactl qos) is what the kernel wrote.
		dcbx, err := strconv.Atoi(abi["DCB_CAP_DCBX_HOST"])
		if err != nil {
			t.Fatal(err)
		}
		ieeeVer, _ := strconv.Atoi(abi["DCB_CAP_DCBX_VER_IEEE"])
		reply := cat(cbytes("dcbmsg"), nla(attrIfname, []byte("ens1f0np0\x00")),
			nla(attrIEEE,
				nla(attrIEEEETS, cbytes("ieee_ets")),
				nla(attrIEEEPFC, cbytes("ieee_pfc")),
				nla(attrIEEEAppTable, nla(attrIEEEApp, cbytes("dcb_app")))),
			nla(attrDCBX, []byte{uint8(dcbx | ieeeVer)}))
		got, err := decodeIEEE(reply)
		if err != nil {
			t.Fatalf("decodeIEEE(reply of C structs): %v", err)
		}
		want := &IEEE{Ifname: "ens1f0np0", ETS: &wantETS, PFC: &pfc, Apps: []App{app}, HasDCBX: true, DCBX: DCBXHost | DCBXVerIEEE}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("decodeIEEE(reply of C structs) (-want +got):\n%s", diff)
		}
		if names := DCBXNames(got.DCBX); !slices.Equal(names, []string{"host", "ieee"}) {
			t.Errorf("DCBXNames(%#x) = %q, want [host ieee]", got.DCBX, names)
		}
	})
}

func compareInts(t *testing.T, abi map[string]string, want map[string]int) {
	t.Helper()
	for name, w := range want {
		s, ok := abi[name]
		if !ok {
			t.Errorf("%s: not printed by layout.c", name)
			continue
		}
		got, err := strconv.Atoi(s)
		if err != nil {
			t.Errorf("%s: bad value %q", name, s)
			continue
		}
		if got != w {
			t.Errorf("%s: header says %d, Go has %d", name, got, w)
		}
	}
}
