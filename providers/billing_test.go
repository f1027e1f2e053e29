package providers

import (
	"fmt"
	"testing"
)

func TestCostRoundsUp(t *testing.T) {
	a, b := PriceList(A), PriceList(B)
	for _, c := range []struct {
		list  Billing
		meter string
		qty   int64
		want  int64
	}{
		{b, MeterTrainTokens, 0, 0},
		{b, MeterTrainTokens, 1, 1},            // 1 µUSD per token exactly
		{b, MeterForwardTokens, 1, 1},          // 0.3 µUSD rounds up
		{b, MeterForwardTokens, 10, 3},         // 3 exactly
		{b, MeterForwardTokens, 11, 4},         // 3.3
		{a, MeterDeviceMS, 3_600_000, 1999998}, // an hour at 555,555 per million ms
		{a, MeterTrainTokens, 1000, 0},         // provider_a does not price tokens
		{b, MeterDeviceMS, 1000, 0},            // nor provider_b device time
		{b, "unknown", 1000, 0},                // a meter without a price costs nothing
	} {
		if got := c.list.Cost(c.meter, c.qty); got != c.want {
			t.Errorf("%d %s: %d µUSD, want %d", c.qty, c.meter, got, c.want)
		}
	}
}

func TestMeter(t *testing.T) {
	for _, c := range []struct {
		provider  string
		meter     string
		succeeded bool
		tokens    int64
		ms        int64
		want      string
	}{
		{A, MeterTrainTokens, true, 18, 3, "[{device_ms 3}]"},
		{A, MeterTrainTokens, false, 18, 2, "[{device_ms 2}]"}, // failed: the device was used all the same
		{A, "", true, 0, 1, "[{device_ms 1}]"},
		{A, MeterForwardTokens, false, 0, 0, "[]"}, // cancelled before it started
		{B, MeterTrainTokens, true, 18, 3, "[{train_tokens 18}]"},
		{B, MeterForwardTokens, true, 9, 1, "[{forward_tokens 9}]"},
		{B, MeterTrainTokens, false, 18, 2, "[]"}, // failed: no tokens billed
		{B, "", true, 0, 1, "[]"},                 // optim_step: nothing per token
		{B, MeterSampleTokens, true, 40, 5, "[{sample_tokens 40}]"},
	} {
		if got := fmt.Sprint(Meter(c.provider, c.meter, c.succeeded, c.tokens, c.ms)); got != c.want {
			t.Errorf("%s %s succeeded=%v: %s, want %s", c.provider, c.meter, c.succeeded, got, c.want)
		}
	}
	if !SettlesLater(A) || SettlesLater(B) {
		t.Error("only provider_a's usage settles later")
	}
}
