package apitype

import (
	"encoding/json"
	"reflect"
)

// withLists returns a copy of the struct v whose nil slice and map fields
// are empty ones, so that its JSON has [] and {} there, never null (one
// level: a nested struct type of this package has its own MarshalJSON).
// Clients then iterate any list without a nil check, whoever built the
// value. TestNoNullLists keeps every struct type of the package with a
// list or map field on it.
func withLists[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		if !f.CanSet() || !f.IsZero() {
			continue
		}
		switch f.Kind() {
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
		}
	}
	return v
}

// MarshalJSON writes ApplyResult with changes as [] rather than null.
func (r ApplyResult) MarshalJSON() ([]byte, error) {
	type plain ApplyResult // no methods: no recursion
	return json.Marshal(plain(withLists(r)))
}

// MarshalJSON writes DiffResult with its lists as [] rather than null.
func (r DiffResult) MarshalJSON() ([]byte, error) {
	type plain DiffResult
	return json.Marshal(plain(withLists(r)))
}

// MarshalJSON writes DoctorReport with checks as [] rather than null.
func (r DoctorReport) MarshalJSON() ([]byte, error) {
	type plain DoctorReport
	return json.Marshal(plain(withLists(r)))
}

// MarshalJSON writes BandwidthStatus with refused as {} rather than null.
func (s BandwidthStatus) MarshalJSON() ([]byte, error) {
	type plain BandwidthStatus
	return json.Marshal(plain(withLists(s)))
}

// MarshalJSON writes Device with ports as [] rather than null.
func (d Device) MarshalJSON() ([]byte, error) {
	type plain Device
	return json.Marshal(plain(withLists(d)))
}

// MarshalJSON writes Port with gids as [] rather than null.
func (p Port) MarshalJSON() ([]byte, error) {
	type plain Port
	return json.Marshal(plain(withLists(p)))
}

// FillLists sets s's nil lists and maps to empty ones, so that its JSON has
// [] and {} there. Snapshot has no MarshalJSON that would do it: encoding/json
// re-scans what a MarshalJSON returns, and GET /v1/status at 1,000 peers is
// 1.4 MB; the store calls FillLists once for each snapshot it publishes
// instead (state.Store).
func (s *Snapshot) FillLists() { *s = withLists(*s) }

// MarshalJSON writes PolicyState with policies as [] rather than null.
func (s PolicyState) MarshalJSON() ([]byte, error) {
	type plain PolicyState
	return json.Marshal(plain(withLists(s)))
}

// MarshalJSON writes PolicyStatus with targets as [] rather than null.
func (s PolicyStatus) MarshalJSON() ([]byte, error) {
	type plain PolicyStatus
	return json.Marshal(plain(withLists(s)))
}

// MarshalJSON writes PoolDevice with classes as [] rather than null.
func (d PoolDevice) MarshalJSON() ([]byte, error) {
	type plain PoolDevice
	return json.Marshal(plain(withLists(d)))
}
