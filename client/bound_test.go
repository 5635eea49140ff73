package client

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestBoundedReader: values are counted outside strings only (a string of
// commas and brackets, with escaped quotes, is one value), and reading
// fails once past either bound.
func TestBoundedReader(t *testing.T) {
	errBig := errors.New("too large")
	read := func(s string, maxBytes, maxValues int64) (*boundedReader, error) {
		b := &boundedReader{r: strings.NewReader(s), maxBytes: maxBytes, maxValues: maxValues,
			tooLarge: func(string) error { return errBig }}
		_, err := io.ReadAll(b)
		return b, err
	}
	b, err := read(`{"a":"[,{,\",]\\","b":[1,2,3]}`, 100, 100)
	// The object, the comma after "a", the array and its two commas.
	if err != nil || b.values != 5 {
		t.Errorf("values %d, err %v; want 5", b.values, err)
	}
	if _, err := read(strings.Repeat("[", 11), 100, 10); err != errBig {
		t.Errorf("11 values over a bound of 10: %v, want the bound's error", err)
	}
	if _, err := read(strings.Repeat("a", 101), 100, 10); err != errBig {
		t.Errorf("101 bytes over a bound of 100: %v, want the bound's error", err)
	}
	if _, err := read(strings.Repeat("a", 100), 100, 10); err != nil {
		t.Errorf("100 bytes at a bound of 100: %v, want read", err)
	}
}
