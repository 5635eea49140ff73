// Package e2e holds rdmad's end-to-end tests. They carry the build tag e2e
// and run as root inside the test VM (Soft-RoCE rxe0, systemd, rdmad
// installed and started), driving rdmactl, systemctl and rdma(8) the way an
// admin would. Run them with test/vm/e2e (see docs/TESTING.md); outside the
// VM they skip.
//
// A package whose tests need two nodes marks one of its files with the line
//
//	//e2e:nodes 2
//
// and test/vm/e2e runs it with test/vm/run --nodes 2.
package e2e
