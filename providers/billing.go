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

// PriceList is provider p's price list: tokens at list prices per million,
// and device time at an hourly rate (provider_a's dedicated trainers cost
// more per hour than provider_b's shared pool).
func PriceList(p string) Billing {
	perHour := int64(2_000_000) // 2 USD per device hour
	if p == B {
		perHour = 1_500_000
	}
	return Billing{
		Currency: "USD",
		PerMillion: map[string]int64{
			MeterTrainTokens:   1_000_000, // 1 USD per million tokens
			MeterForwardTokens: 300_000,
			MeterSampleTokens:  400_000,
			MeterDeviceMS:      perHour * 1_000_000 / 3_600_000, // per million ms
		},
		Units: map[string]string{MeterTrainTokens: "token", MeterForwardTokens: "token", MeterSampleTokens: "token", MeterDeviceMS: "millisecond"},
	}
}

// Cost is the price of qty units of meter in micro-USD, rounded up.
func (b Billing) Cost(meter string, qty int64) int64 {
	return (qty*b.PerMillion[meter] + 999_999) / 1_000_000
}

// Reading is one meter's quantity for one operation.
type Reading struct {
	Meter    string
	Quantity int64
}

// Meter reads what one executed operation used: device time whenever the
// executor ran it (failed and cancelled work used the device too), and its
// tokens on tokenMeter (its kind's, "" for none) only when it succeeded (a
// refused batch is not billed per token).
func Meter(tokenMeter string, succeeded bool, tokens, deviceMS int64) []Reading {
	var rs []Reading
	if succeeded && tokens > 0 && tokenMeter != "" {
		rs = append(rs, Reading{tokenMeter, tokens})
	}
	if deviceMS > 0 {
		rs = append(rs, Reading{MeterDeviceMS, deviceMS})
	}
	return rs
}

// SettlesAtRelease reports whether provider p's meter is billed only when
// the run's trainer is released: provider_a bills its dedicated trainers'
// device time per lease, so those components stay pending until the run
// ends; tokens, and all of provider_b's usage, settle when observed.
func SettlesAtRelease(p, meter string) bool {
	return p == A && meter == MeterDeviceMS
}
