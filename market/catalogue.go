package market

import "sort"

// Accelerator is one normalised entry of the model catalogue shipped with the
// product, so that "H100 80GB SXM" means one thing everywhere. Figures are the
// vendor's published dense figures.
type Accelerator struct {
	ID          string // stable key, e.g. "nvidia-h100-80gb-sxm"
	Vendor      string // "NVIDIA", "AMD"
	Family      string // "H100", "A100", ...; buyers may constrain by family
	Name        string // display name, e.g. "H100 80GB SXM"
	MemoryGB    int
	FormFactor  string // "SXM", "PCIe", "OAM"
	BF16TFLOPS  int    // dense BF16 (FP16 where the part has no BF16)
	MemBWGBs    int    // memory bandwidth, GB/s
	TDPWatts    int    // board power, used for energy and emissions estimates
	Stack       string // "cuda" or "rocm"
	ReleaseYear int
}

// noNVLink are the models whose devices cannot be joined by NVLink (or
// an equivalent GPU-to-GPU fabric): they talk over PCIe only.
var noNVLink = map[string]bool{
	"nvidia-l40s-48gb-pcie": true, "nvidia-a10-24gb-pcie": true, "nvidia-l4-24gb-pcie": true,
	"nvidia-rtx4090-24gb-pcie": true, "nvidia-v100-16gb-pcie": true, "nvidia-t4-16gb-pcie": true,
	"nvidia-p100-16gb-pcie": true,
}

// NVLink reports whether the model's devices can be joined by NVLink (an
// SXM board, an NVLink bridge on PCIe cards, or AMD's Infinity Fabric).
func (a Accelerator) NVLink() bool { return !noNVLink[a.ID] }

// ReferenceAcceleratorID is the accelerator whose device-hour is one
// reference-device-hour: work stated in reference-device-hours needs
// fewer hours on faster devices, in proportion to RelativeThroughputPermille.
const ReferenceAcceleratorID = "nvidia-a100-80gb-sxm"

var accelerators = []Accelerator{
	{ID: "nvidia-b200-192gb-sxm", Vendor: "NVIDIA", Family: "B200", Name: "B200 192GB SXM", MemoryGB: 192, FormFactor: "SXM", BF16TFLOPS: 2250, MemBWGBs: 8000, TDPWatts: 1000, Stack: "cuda", ReleaseYear: 2024},
	{ID: "nvidia-h200-141gb-sxm", Vendor: "NVIDIA", Family: "H200", Name: "H200 141GB SXM", MemoryGB: 141, FormFactor: "SXM", BF16TFLOPS: 989, MemBWGBs: 4800, TDPWatts: 700, Stack: "cuda", ReleaseYear: 2024},
	{ID: "nvidia-h100-80gb-sxm", Vendor: "NVIDIA", Family: "H100", Name: "H100 80GB SXM", MemoryGB: 80, FormFactor: "SXM", BF16TFLOPS: 989, MemBWGBs: 3350, TDPWatts: 700, Stack: "cuda", ReleaseYear: 2023},
	{ID: "nvidia-h100-80gb-pcie", Vendor: "NVIDIA", Family: "H100", Name: "H100 80GB PCIe", MemoryGB: 80, FormFactor: "PCIe", BF16TFLOPS: 756, MemBWGBs: 2000, TDPWatts: 350, Stack: "cuda", ReleaseYear: 2023},
	{ID: "nvidia-a100-80gb-sxm", Vendor: "NVIDIA", Family: "A100", Name: "A100 80GB SXM", MemoryGB: 80, FormFactor: "SXM", BF16TFLOPS: 312, MemBWGBs: 2039, TDPWatts: 400, Stack: "cuda", ReleaseYear: 2020},
	{ID: "nvidia-a100-40gb-pcie", Vendor: "NVIDIA", Family: "A100", Name: "A100 40GB PCIe", MemoryGB: 40, FormFactor: "PCIe", BF16TFLOPS: 312, MemBWGBs: 1555, TDPWatts: 250, Stack: "cuda", ReleaseYear: 2020},
	{ID: "nvidia-l40s-48gb-pcie", Vendor: "NVIDIA", Family: "L40S", Name: "L40S 48GB PCIe", MemoryGB: 48, FormFactor: "PCIe", BF16TFLOPS: 362, MemBWGBs: 864, TDPWatts: 350, Stack: "cuda", ReleaseYear: 2023},
	{ID: "nvidia-a10-24gb-pcie", Vendor: "NVIDIA", Family: "A10", Name: "A10 24GB PCIe", MemoryGB: 24, FormFactor: "PCIe", BF16TFLOPS: 125, MemBWGBs: 600, TDPWatts: 150, Stack: "cuda", ReleaseYear: 2021},
	{ID: "nvidia-l4-24gb-pcie", Vendor: "NVIDIA", Family: "L4", Name: "L4 24GB PCIe", MemoryGB: 24, FormFactor: "PCIe", BF16TFLOPS: 121, MemBWGBs: 300, TDPWatts: 72, Stack: "cuda", ReleaseYear: 2023},
	{ID: "nvidia-rtx4090-24gb-pcie", Vendor: "NVIDIA", Family: "RTX 4090", Name: "RTX 4090 24GB", MemoryGB: 24, FormFactor: "PCIe", BF16TFLOPS: 165, MemBWGBs: 1008, TDPWatts: 450, Stack: "cuda", ReleaseYear: 2022},
	{ID: "nvidia-rtx3090-24gb-pcie", Vendor: "NVIDIA", Family: "RTX 3090", Name: "RTX 3090 24GB", MemoryGB: 24, FormFactor: "PCIe", BF16TFLOPS: 71, MemBWGBs: 936, TDPWatts: 350, Stack: "cuda", ReleaseYear: 2020},
	{ID: "nvidia-v100-32gb-sxm", Vendor: "NVIDIA", Family: "V100", Name: "V100 32GB SXM2", MemoryGB: 32, FormFactor: "SXM", BF16TFLOPS: 125, MemBWGBs: 900, TDPWatts: 300, Stack: "cuda", ReleaseYear: 2018},
	{ID: "nvidia-v100-16gb-pcie", Vendor: "NVIDIA", Family: "V100", Name: "V100 16GB PCIe", MemoryGB: 16, FormFactor: "PCIe", BF16TFLOPS: 112, MemBWGBs: 900, TDPWatts: 250, Stack: "cuda", ReleaseYear: 2017},
	{ID: "nvidia-t4-16gb-pcie", Vendor: "NVIDIA", Family: "T4", Name: "T4 16GB PCIe", MemoryGB: 16, FormFactor: "PCIe", BF16TFLOPS: 65, MemBWGBs: 320, TDPWatts: 70, Stack: "cuda", ReleaseYear: 2018},
	{ID: "nvidia-p100-16gb-pcie", Vendor: "NVIDIA", Family: "P100", Name: "P100 16GB PCIe", MemoryGB: 16, FormFactor: "PCIe", BF16TFLOPS: 19, MemBWGBs: 732, TDPWatts: 250, Stack: "cuda", ReleaseYear: 2016},
	{ID: "amd-mi300x-192gb-oam", Vendor: "AMD", Family: "MI300X", Name: "MI300X 192GB OAM", MemoryGB: 192, FormFactor: "OAM", BF16TFLOPS: 1307, MemBWGBs: 5300, TDPWatts: 750, Stack: "rocm", ReleaseYear: 2023},
	{ID: "amd-mi250x-128gb-oam", Vendor: "AMD", Family: "MI250X", Name: "MI250X 128GB OAM", MemoryGB: 128, FormFactor: "OAM", BF16TFLOPS: 383, MemBWGBs: 3277, TDPWatts: 560, Stack: "rocm", ReleaseYear: 2021},
}

var acceleratorByID = func() map[string]Accelerator {
	m := make(map[string]Accelerator, len(accelerators))
	for _, a := range accelerators {
		m[a.ID] = a
	}
	return m
}()

// Accelerators returns the catalogue, fastest first. The slice is a copy.
func Accelerators() []Accelerator {
	out := append([]Accelerator(nil), accelerators...)
	return out
}

// FindAccelerator returns the catalogue entry with the given id.
func FindAccelerator(id string) (Accelerator, bool) {
	a, ok := acceleratorByID[id]
	return a, ok
}

// RelativeThroughputPermille is the accelerator's published BF16 throughput
// relative to the reference accelerator, in thousandths (reference = 1000).
func (a Accelerator) RelativeThroughputPermille() int64 {
	ref := acceleratorByID[ReferenceAcceleratorID]
	return MulDivRound(int64(a.BF16TFLOPS), 1000, int64(ref.BF16TFLOPS))
}

// Families returns the distinct accelerator families in catalogue order.
func Families() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range accelerators {
		if !seen[a.Family] {
			seen[a.Family] = true
			out = append(out, a.Family)
		}
	}
	return out
}

// Region is one normalised location: a site in a country, with a default
// grid carbon intensity (annual mean, gCO2/kWh) used when a provider states none.
type Region struct {
	ID            string // e.g. "us-west-or"
	Name          string // "US West (Oregon)"
	Country       string // ISO 3166-1 alpha-2, for data residency
	Site          string // metro or site name
	Group         string // "North America", "Europe", "Asia-Pacific"
	DefaultCarbon int    // gCO2/kWh, annual mean of the regional grid
	CarbonSource  string // where DefaultCarbon comes from
	BalancingAuth string // US EIA balancing authority, where one applies
}

// Region defaults: US figures are 2022 annual means of hourly EIA data per
// balancing authority; the others are 2022 national/grid annual averages
// (Ember, European Environment Agency, national grid operators), rounded.
var regions = []Region{
	{ID: "us-west-or", Name: "US West (Oregon)", Country: "US", Site: "Hillsboro", Group: "North America", DefaultCarbon: 55, CarbonSource: "EIA BPAT 2022 mean", BalancingAuth: "BPAT"},
	{ID: "us-west-ca", Name: "US West (California)", Country: "US", Site: "San Jose", Group: "North America", DefaultCarbon: 256, CarbonSource: "EIA CISO 2022 mean", BalancingAuth: "CISO"},
	{ID: "us-southwest-az", Name: "US Southwest (Arizona)", Country: "US", Site: "Phoenix", Group: "North America", DefaultCarbon: 575, CarbonSource: "EIA AZPS 2022 mean", BalancingAuth: "AZPS"},
	{ID: "us-south-tx", Name: "US South (Texas)", Country: "US", Site: "Dallas", Group: "North America", DefaultCarbon: 347, CarbonSource: "EIA ERCO 2022 mean", BalancingAuth: "ERCO"},
	{ID: "us-central-il", Name: "US Central (Illinois)", Country: "US", Site: "Chicago", Group: "North America", DefaultCarbon: 441, CarbonSource: "EIA MISO 2022 mean", BalancingAuth: "MISO"},
	{ID: "us-east-va", Name: "US East (Virginia)", Country: "US", Site: "Ashburn", Group: "North America", DefaultCarbon: 363, CarbonSource: "EIA PJM 2022 mean", BalancingAuth: "PJM"},
	{ID: "us-east-ny", Name: "US East (New York)", Country: "US", Site: "Buffalo", Group: "North America", DefaultCarbon: 273, CarbonSource: "EIA NYIS 2022 mean", BalancingAuth: "NYIS"},
	{ID: "us-southeast-ga", Name: "US Southeast (Georgia)", Country: "US", Site: "Atlanta", Group: "North America", DefaultCarbon: 423, CarbonSource: "EIA SOCO 2022 mean", BalancingAuth: "SOCO"},
	{ID: "ca-east-qc", Name: "Canada East (Québec)", Country: "CA", Site: "Montréal", Group: "North America", DefaultCarbon: 30, CarbonSource: "Hydro-Québec grid average"},
	{ID: "eu-north-se", Name: "EU North (Sweden)", Country: "SE", Site: "Stockholm", Group: "Europe", DefaultCarbon: 41, CarbonSource: "Ember 2022, Sweden"},
	{ID: "eu-north-fi", Name: "EU North (Finland)", Country: "FI", Site: "Helsinki", Group: "Europe", DefaultCarbon: 79, CarbonSource: "Ember 2022, Finland"},
	{ID: "eu-north-is", Name: "EU North (Iceland)", Country: "IS", Site: "Reykjavík", Group: "Europe", DefaultCarbon: 28, CarbonSource: "Ember 2022, Iceland"},
	{ID: "eu-west-ie", Name: "EU West (Ireland)", Country: "IE", Site: "Dublin", Group: "Europe", DefaultCarbon: 331, CarbonSource: "Ember 2022, Ireland"},
	{ID: "eu-west-fr", Name: "EU West (France)", Country: "FR", Site: "Paris", Group: "Europe", DefaultCarbon: 85, CarbonSource: "Ember 2022, France"},
	{ID: "eu-central-de", Name: "EU Central (Germany)", Country: "DE", Site: "Frankfurt", Group: "Europe", DefaultCarbon: 385, CarbonSource: "Ember 2022, Germany"},
	{ID: "eu-west-nl", Name: "EU West (Netherlands)", Country: "NL", Site: "Amsterdam", Group: "Europe", DefaultCarbon: 356, CarbonSource: "Ember 2022, Netherlands"},
	{ID: "ap-northeast-jp", Name: "Asia Pacific (Tokyo)", Country: "JP", Site: "Tokyo", Group: "Asia-Pacific", DefaultCarbon: 485, CarbonSource: "Ember 2022, Japan"},
	{ID: "ap-southeast-sg", Name: "Asia Pacific (Singapore)", Country: "SG", Site: "Singapore", Group: "Asia-Pacific", DefaultCarbon: 470, CarbonSource: "Ember 2022, Singapore"},
	{ID: "ap-south-in", Name: "Asia Pacific (Mumbai)", Country: "IN", Site: "Mumbai", Group: "Asia-Pacific", DefaultCarbon: 713, CarbonSource: "Ember 2022, India"},
	{ID: "ap-southeast-au", Name: "Asia Pacific (Sydney)", Country: "AU", Site: "Sydney", Group: "Asia-Pacific", DefaultCarbon: 549, CarbonSource: "Ember 2022, Australia"},
}

var regionByID = func() map[string]Region {
	m := make(map[string]Region, len(regions))
	for _, r := range regions {
		m[r.ID] = r
	}
	return m
}()

// Regions returns the normalised regions. The slice is a copy.
func Regions() []Region { return append([]Region(nil), regions...) }

// FindRegion returns the region with the given id.
func FindRegion(id string) (Region, bool) {
	r, ok := regionByID[id]
	return r, ok
}

// Countries returns the distinct country codes of the regions, sorted.
func Countries() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range regions {
		if !seen[r.Country] {
			seen[r.Country] = true
			out = append(out, r.Country)
		}
	}
	sort.Strings(out)
	return out
}

var countryNames = map[string]string{
	"AU": "Australia", "CA": "Canada", "DE": "Germany", "FI": "Finland", "FR": "France", "IE": "Ireland",
	"IN": "India", "IS": "Iceland", "JP": "Japan", "NL": "Netherlands", "SE": "Sweden", "SG": "Singapore",
	"US": "United States",
}

// CountryName is the English name of a region's country code, or the code
// itself when it is not one of the regions' countries.
func CountryName(code string) string {
	if n, ok := countryNames[code]; ok {
		return n
	}
	return code
}

// Interconnect is the link between the devices inside one node.
type Interconnect string

// Intra-node interconnects, weakest first.
const (
	InterconnectPCIe   Interconnect = "pcie"
	InterconnectNVLink Interconnect = "nvlink" // also AMD Infinity Fabric (xGMI)
)

// Rank orders interconnects so a minimum can be compared; 0 is unknown.
func (i Interconnect) Rank() int {
	switch i {
	case InterconnectPCIe:
		return 1
	case InterconnectNVLink:
		return 2
	}
	return 0
}

// Label is the display name.
func (i Interconnect) Label() string {
	switch i {
	case InterconnectPCIe:
		return "PCIe"
	case InterconnectNVLink:
		return "NVLink / Infinity Fabric"
	}
	return string(i)
}

// Network is the fabric between nodes of an offer.
type Network struct {
	ID    string // "none", "ethernet-25", "infiniband-400", ...
	Label string
	Gbps  int // per-node bandwidth
	RDMA  bool
}

var networks = []Network{
	{ID: "none", Label: "None (single node)", Gbps: 0},
	{ID: "ethernet-10", Label: "Ethernet 10 Gb/s", Gbps: 10},
	{ID: "ethernet-25", Label: "Ethernet 25 Gb/s", Gbps: 25},
	{ID: "ethernet-100", Label: "Ethernet 100 Gb/s", Gbps: 100},
	{ID: "roce-200", Label: "RoCE 200 Gb/s", Gbps: 200, RDMA: true},
	{ID: "infiniband-200", Label: "InfiniBand HDR 200 Gb/s", Gbps: 200, RDMA: true},
	{ID: "roce-400", Label: "RoCE 400 Gb/s", Gbps: 400, RDMA: true},
	{ID: "infiniband-400", Label: "InfiniBand NDR 400 Gb/s", Gbps: 400, RDMA: true},
	{ID: "infiniband-800", Label: "InfiniBand XDR 800 Gb/s", Gbps: 800, RDMA: true},
}

// Networks returns the inter-node network kinds, slowest first.
func Networks() []Network { return append([]Network(nil), networks...) }

// FindNetwork returns the network kind with the given id.
func FindNetwork(id string) (Network, bool) {
	for _, n := range networks {
		if n.ID == id {
			return n, true
		}
	}
	return Network{}, false
}
