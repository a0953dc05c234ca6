package market

import "testing"

func TestReliabilityBP(t *testing.T) {
	const h = 3600
	tests := []struct {
		name string
		r    ProviderRecord
		want int
	}{
		{name: "no history is the prior", r: ProviderRecord{}, want: DefaultReliabilityBP},
		// (500 h × 95 % + 500 h × 100 %) / 1000 h = 97.5 %
		{name: "as much flawless delivery as the prior", r: ProviderRecord{PromisedDeviceSeconds: 500 * h}, want: 9750},
		// (475 + 250) / 1000 = 72.5 %
		{name: "half of it lost", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 250 * h}, want: 7250},
		// (475 + 49_500) / 50_000 = 99.95 %
		{name: "a long clean record approaches 100 %", r: ProviderRecord{PromisedDeviceSeconds: 49_500 * h}, want: 9995},
		{name: "incidents cost 25 bp each", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, RecentIncidents: 4}, want: 9650},
		{name: "the incident penalty is capped", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, RecentIncidents: 1000}, want: 8750},
		{name: "lost above promised counts as all lost", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 900 * h}, want: 4750},
		{name: "never below 1 (0 means unknown)", r: ProviderRecord{PromisedDeviceSeconds: 1_000_000 * h, LostDeviceSeconds: 1_000_000 * h, RecentIncidents: 100}, want: 1},
		{name: "negative inputs are ignored", r: ProviderRecord{PromisedDeviceSeconds: -5, LostDeviceSeconds: -5, RecentIncidents: -3}, want: DefaultReliabilityBP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReliabilityBP(tt.r); got != tt.want {
				t.Errorf("ReliabilityBP(%+v) = %d, want %d", tt.r, got, tt.want)
			}
		})
	}
}

// More delivered device-time without loss never lowers the score, and more
// loss never raises it.
func TestReliabilityBPMonotone(t *testing.T) {
	const h = 3600
	for promised := int64(0); promised <= 5000*h; promised += 250 * h {
		for lost := int64(0); lost <= promised; lost += 250 * h {
			s := ReliabilityBP(ProviderRecord{PromisedDeviceSeconds: promised, LostDeviceSeconds: lost})
			if more := ReliabilityBP(ProviderRecord{PromisedDeviceSeconds: promised + 100*h, LostDeviceSeconds: lost}); more < s {
				t.Fatalf("promised %d lost %d: more clean delivery lowered %d to %d", promised, lost, s, more)
			}
			if lost+100*h <= promised {
				if worse := ReliabilityBP(ProviderRecord{PromisedDeviceSeconds: promised, LostDeviceSeconds: lost + 100*h}); worse > s {
					t.Fatalf("promised %d lost %d: more loss raised %d to %d", promised, lost, s, worse)
				}
			}
		}
	}
}
