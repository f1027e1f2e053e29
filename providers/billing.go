package providers

// Meters: what a usage component measures. Token meters count the
// positions the model processed; device_ms is executor (GPU, here CPU) time.
const (
	MeterTrainTokens   = "train_tokens"   // forward_backward
	MeterForwardTokens = "forward_tokens" // forward
	MeterSampleTokens  = "sample_tokens"  // sample and logprobs: prompt and generated tokens
	MeterDeviceMS      = "device_ms"      // any operation an executor ran
)

// Settlement statuses of a usage component.
const (
	Pending = "pending" // priced at the list price, not yet billed by the provider
	Settled = "settled" // final
)

// Billing is a capability row's price list. Prices are integer micro-USD
// per million units, so that sub-micro-USD unit prices stay integers; a
// component's cost is rounded up to a whole micro-USD.
type Billing struct {
	Currency   string            `json:"currency"`
	PerMillion map[string]int64  `json:"microusd_per_million_units"`
	Units      map[string]string `json:"units"`
}

// PriceList is provider p's price list. provider_a runs work on dedicated
// trainers and bills their device time by the hour; provider_b is a shared
// pool and bills tokens at list prices per million.
func PriceList(p string) Billing {
	if p == A {
		return Billing{
			Currency:   "USD",
			PerMillion: map[string]int64{MeterDeviceMS: 2_000_000 * 1_000_000 / 3_600_000}, // 2 USD per device hour, per million ms
			Units:      map[string]string{MeterDeviceMS: "millisecond"},
		}
	}
	return Billing{
		Currency: "USD",
		PerMillion: map[string]int64{
			MeterTrainTokens:   1_000_000, // 1 USD per million tokens
			MeterForwardTokens: 300_000,
			MeterSampleTokens:  400_000,
		},
		Units: map[string]string{MeterTrainTokens: "token", MeterForwardTokens: "token", MeterSampleTokens: "token"},
	}
}

// Cost is the price of qty units of meter in micro-USD, rounded up (0 for
// a meter the list does not price).
func (b Billing) Cost(meter string, qty int64) int64 {
	return (qty*b.PerMillion[meter] + 999_999) / 1_000_000
}

// Reading is one meter's quantity for one operation.
type Reading struct {
	Meter    string
	Quantity int64
}

// Meter reads what one executed operation used, as provider p bills it:
// provider_a the device time of any operation an executor ran (failed and
// cancelled work used the device too); provider_b the tokens on
// tokenMeter (its kind's, "" for none) of one that succeeded (a refused
// batch is not billed).
func Meter(p, tokenMeter string, succeeded bool, tokens, deviceMS int64) []Reading {
	switch {
	case p == A && deviceMS > 0:
		return []Reading{{MeterDeviceMS, deviceMS}}
	case p == B && succeeded && tokens > 0 && tokenMeter != "":
		return []Reading{{tokenMeter, tokens}}
	}
	return nil
}

// SharesPasses reports whether provider p's runs may share passes through
// their base model with other such runs' work (provider_b's shared pool);
// provider_a's dedicated trainer runs its own, whose device time it bills.
func SharesPasses(p string) bool { return p == B }

// SettlesLater reports whether provider p's usage is observed at once and
// settled later, when the provider has billed it (the settlement pass,
// actors/usage): provider_a's device time is invoiced by the provider;
// provider_b's tokens settle when observed.
func SettlesLater(p string) bool { return p == A }
