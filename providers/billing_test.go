package providers

import (
	"fmt"
	"testing"
)

func TestCostRoundsUp(t *testing.T) {
	b := PriceList(A)
	for _, c := range []struct {
		meter string
		qty   int64
		want  int64
	}{
		{MeterTrainTokens, 0, 0},
		{MeterTrainTokens, 1, 1},            // 1 µUSD per token exactly
		{MeterForwardTokens, 1, 1},          // 0.3 µUSD rounds up
		{MeterForwardTokens, 10, 3},         // 3 exactly
		{MeterForwardTokens, 11, 4},         // 3.3
		{MeterDeviceMS, 3_600_000, 1999998}, // an hour at 555,555 per million ms
		{"unknown", 1000, 0},                // a meter without a price costs nothing
	} {
		if got := b.Cost(c.meter, c.qty); got != c.want {
			t.Errorf("%d %s: %d µUSD, want %d", c.qty, c.meter, got, c.want)
		}
	}
}

func TestMeter(t *testing.T) {
	for _, c := range []struct {
		meter     string
		succeeded bool
		tokens    int64
		ms        int64
		want      string
	}{
		{MeterTrainTokens, true, 18, 3, "[{train_tokens 18} {device_ms 3}]"},
		{MeterForwardTokens, true, 9, 1, "[{forward_tokens 9} {device_ms 1}]"},
		{MeterTrainTokens, false, 18, 2, "[{device_ms 2}]"}, // failed: device time only
		{"", true, 0, 1, "[{device_ms 1}]"},
		{MeterSampleTokens, true, 40, 5, "[{sample_tokens 40} {device_ms 5}]"},
		{MeterSampleTokens, true, 12, 1, "[{sample_tokens 12} {device_ms 1}]"},
		{MeterForwardTokens, false, 0, 0, "[]"}, // cancelled before it started
	} {
		if got := fmt.Sprint(Meter(c.meter, c.succeeded, c.tokens, c.ms)); got != c.want {
			t.Errorf("%s succeeded=%v: %s, want %s", c.meter, c.succeeded, got, c.want)
		}
	}
	if !SettlesAtRelease(A, MeterDeviceMS) || SettlesAtRelease(B, MeterDeviceMS) || SettlesAtRelease(A, MeterTrainTokens) {
		t.Error("only provider_a's device time waits for the trainer's release")
	}
}
