package protocol

import "github.com/wts-project/wts/persistence"

// Owned reads one record owned by tenant t with read; another tenant's
// record is "not found", never "forbidden", so ids leak nothing. what names
// the record in the refusal; owner is the record's tenant.
func Owned[T any](st persistence.Store, what, id string, t persistence.Tenant, read func(persistence.Tx, string, *T) (bool, error), owner func(*T) persistence.Tenant) (*T, error) {
	v := new(T)
	var ok bool
	err := st.View(func(tx persistence.Tx) (err error) {
		ok, err = read(tx, id, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ok || owner(v) != t {
		return nil, NotFound(what, id)
	}
	return v, nil
}
