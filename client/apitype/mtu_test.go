package apitype

import "testing"

func TestRoCEActiveMTU(t *testing.T) {
	tests := []struct{ netdev, want int }{
		{9000, 4096}, {4200, 4096}, {4192, 4096}, {4191, 2048}, {1500, 1024}, {1120, 1024}, {1119, 512}, {351, 0}, {352, 256},
	}
	for _, tt := range tests {
		if got := RoCEActiveMTU(tt.netdev); got != tt.want {
			t.Errorf("RoCEActiveMTU(%d) = %d, want %d", tt.netdev, got, tt.want)
		}
	}
}
