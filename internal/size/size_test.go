package size

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr string
	}{
		{"unlimited", Unlimited, ""},
		{" Infinity ", Unlimited, ""},
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"100B", 100, ""},
		{"4KiB", 4 * KiB, ""},
		{"64MiB", 64 * MiB, ""},
		{"64 MiB", 64 * MiB, ""},
		{"64mib", 64 * MiB, ""},
		{"64M", 64 * MiB, ""},
		{"2G", 2 * GiB, ""},
		{"1TiB", TiB, ""},
		{"", 0, "empty"},
		{"MiB", 0, "want a whole number"},
		{"-1", 0, "want a whole number"},
		{"1.5GiB", 0, `unknown unit ".5GiB"`},
		{"64MB", 0, `decimal unit "MB" is ambiguous; use MiB`},
		{"8kb", 0, "use KiB"},
		{"3 bananas", 0, `unknown unit "bananas"`},
		{"17179869184GiB", 0, "too large"},
		{"18446744073709551615", 0, "too large"},
		{"99999999999999999999", 0, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSizeStringRoundTrip(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{Unlimited, "unlimited"},
		{0, "0B"},
		{100, "100B"},
		{4 * KiB, "4KiB"},
		{1536 * KiB, "1536KiB"},
		{64 * MiB, "64MiB"},
		{3 * GiB, "3GiB"},
		{2 * TiB, "2TiB"},
		{1025, "1025B"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			var back Size
			if err := back.UnmarshalText([]byte(tt.in.String())); err != nil || back != tt.in {
				t.Errorf("UnmarshalText(%q) = %d, %v; want %d", tt.in.String(), back, err, tt.in)
			}
		})
	}
	var s Size
	if err := s.UnmarshalText([]byte("64MB")); err == nil {
		t.Errorf("UnmarshalText(64MB) accepted an ambiguous unit")
	}
}
