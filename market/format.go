package market

import (
	"strconv"
	"time"
)

// How the marketplace writes instants and quantities for people: one
// place, so every page, message and statement reads the same way.

// FormatTime writes a UTC instant as "3 Dec 2026 14:00 UTC"; "—" for the
// zero time.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2 Jan 2006 15:04 UTC")
}

// FormatDate writes a UTC day as "3 Dec 2026"; "—" for the zero time.
func FormatDate(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2 Jan 2006")
}

// FormatSpan writes the interval [start, end) as two instants,
// "3 Dec 2026 14:00 UTC – 4 Dec 2026 14:00 UTC".
func FormatSpan(start, end time.Time) string {
	return FormatTime(start) + " – " + FormatTime(end)
}

// FormatInt writes a whole number with thousands separators: "5,934".
func FormatInt(n int64) string {
	if n < 0 {
		return "−" + FormatInt(-n)
	}
	s := strconv.FormatInt(n, 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// FormatEmissions writes grams of CO2e for people: below a kilogram in
// whole grams ("640 g CO2e"), from a kilogram in kilograms with one
// decimal, rounded half up ("12.3 kg CO2e", "1,204.0 kg CO2e").
func FormatEmissions(g int64) string {
	if g < 0 {
		g = 0
	}
	if g < 1000 {
		return strconv.FormatInt(g, 10) + " g CO2e"
	}
	tenths := (g + 50) / 100
	return FormatInt(tenths/10) + "." + strconv.FormatInt(tenths%10, 10) + " kg CO2e"
}
