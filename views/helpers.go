// Package views renders the server-side pages with templ. Each page takes
// one view-model struct whose values web has already formatted.
package views

import "strconv"

func itoa(n int) string { return strconv.Itoa(n) }

func pluralFields(n int) string {
	if n == 1 {
		return "1 field"
	}
	return strconv.Itoa(n) + " fields"
}

// queryDescribedBy is the query box's aria-describedby: its error when it
// has one, and its help.
func queryDescribedBy(hasError bool) string {
	if hasError {
		return "e-q h-q"
	}
	return "h-q"
}

// devicesText is a device count web formatted ("1", "8") with its noun:
// "1 device", "8 devices".
func devicesText(n string) string {
	if n == "1" {
		return "1 device"
	}
	return n + " devices"
}

// boolAttr writes a flag as an attribute value tests read: "yes" or "no".
func boolAttr(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
