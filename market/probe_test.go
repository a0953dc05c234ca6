package market
import ("testing";"time")
func TestProbeReplay(t *testing.T) {
	dir := traceDataDir(t)
	nodes := readTraceNodes(t, dir)
	pods := readTracePods(t, dir, "openb_pod_list_gpuspec33.csv")
	_, capacity := bestFitReplay(nodes, pods)
	offers, _ := traceOffers(nodes, 8, func(Accelerator) Cents { return 300 })
	idx := NewIndex()
	byID := map[int64]Offer{}
	for _, o := range offers { byID[o.ID] = o; idx.Upsert(Candidate{Offer: o, ReliabilityBP: 9900}) }
	held := map[int64][]Commitment{}
	arrived, n, evald, fits, stopped, none := 0, 0, 0, 0, 0, 0
	for _, p := range pods {
		if arrived >= capacity { break }
		arrived += p.gpus
		req := Request{Workload: Workload{Kind: WorkTraining, Devices: p.gpus, Hours: 168}, Constraints: Constraints{Deadline: benchNow.Add(168 * time.Hour)}, Limit: 1}
		for _, m := range p.models { req.Constraints.AcceleratorIDs = append(req.Constraints.AcceleratorIDs, traceModel[m]) }
		res, _ := idx.Match(req, benchNow)
		n++
		ex := res.Explanation
		e := ex.Fit
		for _, el := range ex.Eliminated { if el.Constraint != ConstraintModel { e += el.Count } }
		evald += e; fits += ex.Fit
		if ex.Skipped > 0 { stopped++ }
		if len(res.Quotes) == 0 { none++; continue }
		c := res.Quotes[0].Pieces[0].Commitment(); o := byID[c.OfferID]
		placed, _ := PlaceCommitments(o, held[o.ID], []Commitment{c})
		held[o.ID] = append(held[o.ID], placed[0]); idx.AddCommitment(placed[0])
	}
	t.Logf("%d pods, %.1f evaluated per pod, %.1f fit, %d stopped early, %d unplaced, %d offers", n, float64(evald)/float64(n), float64(fits)/float64(n), stopped, none, len(offers))
}
