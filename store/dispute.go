package store

// Dispute outcomes an admin decides, beside DisputeOpen.
const (
	DisputeGranted  = "granted"  // a credit was granted to the buyer
	DisputeRejected = "rejected" // no credit
)
