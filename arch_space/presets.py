"""Named accelerators: real chips for validation and the reference's maximum design.

Each preset's parameters come from a data sheet or paper, cited beside it. Peak FLOP/s follows
from the counts (``2 x MACs x clock``) and is checked against the data sheet in
tests/test_arch_presets.py, as is the modelled die area where one is published.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from arch_space.accelerator import Accelerator
from arch_space.formats import preset_format_rates
from phaze_common.errors import unknown_name

__all__ = ["preset", "preset_names", "PUBLISHED", "NVLINK_BYTES_PER_S"]

_MIB = 2**20
_GIB = 2**30

_LISTED: dict[str, Accelerator] = dict(
    {
        # Google TPU v4 (Jouppi et al., "TPU v4", ISCA 2023; "Ten lessons...", ISCA 2021):
        # 2 TensorCores x 4 MXUs of 128x128 bf16 MACs at 1050 MHz = 275 TFLOP/s; a VPU of
        # 8 sublanes x 128 lanes per TensorCore; 128 MiB CMEM; 32 GiB HBM2 in 4 stacks,
        # 1200 GB/s; 7 nm.
        "tpuv4": Accelerator(
            num_tc=8,
            tc_rows=128,
            tc_cols=128,
            num_vc=2,
            vc_lanes=1024,
            glb_bytes=128 * _MIB,
            hbm_bytes=32 * _GIB,
            hbm_bandwidth_bytes_per_s=1.2e12,
            clock_hz=1.05e9,
            node_nm=7,
            name="tpuv4",
            hbm_stacks=4,
        ),
        # NVIDIA A100 SXM4 80GB (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020;
        # A100 80GB datasheet): 108 SMs x 4 Tensor Cores of 256 dense FP16/BF16 FMA per clock
        # (modelled 16x16) at 1410 MHz = 312 TFLOP/s; 64 FP32 lanes per SM; 40 MB L2 as the
        # global buffer; 80 GB HBM2e in 5 stacks at 2039 GB/s; TSMC N7; die 826 mm2.
        "a100": Accelerator(
            num_tc=432,
            tc_rows=16,
            tc_cols=16,
            num_vc=108,
            vc_lanes=64,
            glb_bytes=40 * _MIB,
            hbm_bytes=80 * _GIB,
            hbm_bandwidth_bytes_per_s=2.039e12,
            clock_hz=1.41e9,
            node_nm=7,
            name="a100",
            hbm_stacks=5,
        ),
        # NVIDIA H100 SXM5 80GB (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022;
        # H100 datasheet): 132 SMs x 4 Tensor Cores of 512 dense FP16/BF16 FMA per clock
        # (modelled 16x32) at 1830 MHz = 989 TFLOP/s; 128 FP32 lanes per SM; 50 MB L2;
        # 80 GB HBM3 in 5 stacks at 3.35 TB/s; TSMC 4N (modelled as 5 nm); die 814 mm2.
        "h100": Accelerator(
            num_tc=528,
            tc_rows=16,
            tc_cols=32,
            num_vc=132,
            vc_lanes=128,
            glb_bytes=50 * _MIB,
            hbm_bytes=80 * _GIB,
            hbm_bandwidth_bytes_per_s=3.35e12,
            clock_hz=1.83e9,
            node_nm=5,
            name="h100",
            hbm_stacks=5,
        ),
        # NVIDIA B200 (HGX, 1,000 W): two reticle-sized TSMC 4NP dies (~2 x 800 mm2, TechInsights
        # teardown) in one CoWoS-L package, joined by the 10 TB/s NV-HBI die-to-die link; 148 SMs
        # x 4 Tensor Cores at a 1.86 GHz tensor clock (hmc-tech.com B200 specifications) of 1024
        # dense FP16/BF16 FMA per clock (modelled 16x64) = 2.25 PFLOP/s dense BF16 (FP8 4.5;
        # glennklockwood.com B200, HGX at 1,000 W); 128 FP32 lanes per SM; 65.5 MB L2; 192 GB
        # HBM3e in 8 stacks at 8 TB/s. Modelled as one accelerator of two dies (4NP as 5 nm),
        # each with half the cores, buffer and HBM PHYs: area, yield, cost and carbon per die;
        # the die-to-die link is faster than HBM and not timed (see docs/models.md).
        "b200": Accelerator(
            num_tc=592,
            tc_rows=16,
            tc_cols=64,
            num_vc=148,
            vc_lanes=128,
            glb_bytes=int(62.5 * _MIB),
            hbm_bytes=192 * _GIB,
            hbm_bandwidth_bytes_per_s=8e12,
            clock_hz=1.86e9,
            node_nm=5,
            name="b200",
            hbm_stacks=8,
            dies=2,
        ),
        # NVIDIA V100 SXM2 32GB (NVIDIA Tesla V100 datasheet; Volta whitepaper, 2017): 80 SMs
        # x 8 Tensor Cores of 64 FP16 FMA per clock (4x4x4; 512 FMA per SM, modelled as two
        # 16x16 arrays per SM like the A100's four) at 1530 MHz = 125 TFLOP/s; 64 FP32 lanes per
        # SM; 6 MB L2; 32 GB HBM2 in 4 stacks at 900 GB/s; TSMC 12 nm FFN; die 815 mm2; 300 W.
        "v100": Accelerator(
            num_tc=160,
            tc_rows=16,
            tc_cols=16,
            num_vc=80,
            vc_lanes=64,
            glb_bytes=6 * _MIB,
            hbm_bytes=32 * _GIB,
            hbm_bandwidth_bytes_per_s=0.9e12,
            clock_hz=1.53e9,
            node_nm=12,
            name="v100",
            hbm_stacks=4,
        ),
        # AMD Instinct MI300X (AMD MI300X data sheet and product page; ROCm "AMD Instinct MI300
        # series microarchitecture"): 304 CUs (8 XCDs of 40 CUs, 38 enabled) x 4 Matrix Cores of
        # 256 dense FP16/BF16 MACs per clock (modelled 16x16; 2048 FLOP per CU per clock) at the
        # 2100 MHz peak engine clock = 1307.4 TFLOP/s dense BF16 (FP8 2614.9); 64 stream
        # processors per CU (19,456); the 256 MB Infinity Cache as the global buffer; 192 GB
        # HBM3 in 8 stacks at 5.3 TB/s; 750 W. A chiplet package: 8 XCDs on TSMC N5 over 4 I/O
        # dies on N6 (the Infinity Cache and HBM PHYs sit in the I/O dies). Modelled as 8 equal
        # 5 nm dies holding the package's cores, cache and PHYs (the model has one node and one
        # die kind per package), each with 40 CUs made and 38 enabled (harvest.toml).
        "mi300x": Accelerator(
            num_tc=1216,
            tc_rows=16,
            tc_cols=16,
            num_vc=304,
            vc_lanes=64,
            glb_bytes=256 * _MIB,
            hbm_bytes=192 * _GIB,
            hbm_bandwidth_bytes_per_s=5.3e12,
            clock_hz=2.1e9,
            node_nm=5,
            name="mi300x",
            hbm_stacks=8,
            dies=8,
        ),
        # Google Cloud TPU v5p (Cloud TPU documentation, "TPU v5p"): 2 TensorCores x 4 MXUs,
        # 459 TFLOP/s BF16 (918 TOPS INT8, Google Cloud's v5p announcement), 95 GiB HBM2e at
        # 2765 GB/s, ICI 4,800 Gbps per chip. The MXUs are modelled as the TPU v4's 128x128, so
        # the clock follows from the peak: 459e12 / (2 x 8 x 128 x 128) = 1.751 GHz (1.75 GHz
        # gives 458.8 TFLOP/s). Google publishes neither the VPU, the on-chip memory, the process
        # node, the HBM stack count nor the power: those stay the TPU v4's (VPU, 128 MiB CMEM,
        # 7 nm) or derived (stacks), and it has no TDP.
        "tpuv5p": Accelerator(
            num_tc=8,
            tc_rows=128,
            tc_cols=128,
            num_vc=2,
            vc_lanes=1024,
            glb_bytes=128 * _MIB,
            hbm_bytes=95 * _GIB,
            hbm_bandwidth_bytes_per_s=2.765e12,
            clock_hz=1.75e9,
            node_nm=7,
            name="tpuv5p",
        ),
        # The reference's maximum design (msr-fiddle/phaze Estimator/architecture.py,
        # max_acc_config): 8 tensor cores of 128x128, 2 vector cores of 128 lanes, 128 MiB
        # buffer, at the TPUv4 clock (1.05 GHz) and memory (32 GiB HBM2 at 1.2 TB/s), 7 nm.
        # Its area is the default space's budget.
        "ref-max": Accelerator(
            num_tc=8,
            tc_rows=128,
            tc_cols=128,
            num_vc=2,
            vc_lanes=128,
            glb_bytes=128 * _MIB,
            hbm_bytes=32 * _GIB,
            hbm_bandwidth_bytes_per_s=1.2e12,
            clock_hz=1.05e9,
            node_nm=7,
            name="ref-max",
        ),
    }
)
# Each preset's tensor-core formats at their published dense peaks over bf16's
# (arch_space/data/formats.toml; the V100's fp16-only cores and ref-max stay bf16).
_PRESETS: MappingProxyType[str, Accelerator] = MappingProxyType(
    {
        name: replace(acc, formats=preset_format_rates(name) or acc.formats)
        for name, acc in _LISTED.items()
    }
)
del _LISTED

# NVIDIA H800 SXM5 80GB (NVIDIA H800 Tensor Core GPU datasheet, SXM column: FP16/BF16 and FP8
# Tensor Core rates as the H100 SXM's, 80 GB HBM3 at 3.35 TB/s, up to 700 W; NVLink 400 GB/s
# against the H100 SXM's 900 GB/s): the H100 die and memory with fewer NVLink links, the
# export variant DeepSeek-V3 trained on (arXiv:2412.19437, Sec. 3.1). Every field the models
# read is the h100's, so it takes the h100's sustained rates and formats; only the NVLink
# line rate (:data:`NVLINK_BYTES_PER_S`) differs.
_PRESETS = MappingProxyType({**_PRESETS, "h800": replace(_PRESETS["h100"], name="h800")})

# NVIDIA H200 SXM 141GB (NVIDIA H200 Tensor Core GPU datasheet, SXM column: the H100 SXM's
# Tensor Core rates, 141 GB HBM3e at 4.8 TB/s, up to 700 W, NVLink 900 GB/s): the H100 SXM's
# die, clock and harvesting with six HBM3e stacks (six 1024-bit controllers) in place of five
# HBM3. Only its HBM differs from the h100; its devices.toml table is the h100's
# (``measured_as``), as no H200 measurement was found.
_PRESETS = MappingProxyType(
    {
        **_PRESETS,
        "h200": replace(
            _PRESETS["h100"],
            name="h200",
            hbm_bytes=141 * _GIB,
            hbm_bandwidth_bytes_per_s=4.8e12,
            hbm_stacks=6,
            formats=preset_format_rates("h200") or _PRESETS["h100"].formats,
        ),
    }
)

#: NVLink bandwidth per device per direction (half the data sheets' bidirectional totals), of
#: the presets with NVLink: V100 NVLink 2 300 GB/s, A100 NVLink 3 600 GB/s, H100 and H200 SXM
#: NVLink 4 900 GB/s, H800 SXM 400 GB/s, B200 NVLink 5 1.8 TB/s (the data sheets cited above).
#: The MI300X's Infinity Fabric (7 links of 128 GB/s, 896 GB/s) and the TPUs' ICI are no
#: NVLink and are not listed. A cluster's intra-node links stay the user's
#: (``--intra-node-gbps``): a preset does not set them.
NVLINK_BYTES_PER_S: MappingProxyType[str, float] = MappingProxyType(
    {"v100": 150e9, "a100": 300e9, "h100": 450e9, "h800": 200e9, "h200": 450e9, "b200": 900e9}
)

#: Published figures the presets are checked against: (peak dense bf16 FLOP/s, area of one
#: die mm2 or None, TDP W or None), from the sources cited above.
PUBLISHED: MappingProxyType[str, tuple[float, float | None, float | None]] = MappingProxyType(
    {
        "tpuv4": (275e12, None, 192.0),  # die "<400 mm2" is a bound, not a figure
        "a100": (312e12, 826.0, 400.0),
        "h100": (989e12, 814.0, 700.0),
        "h800": (989e12, 814.0, 700.0),  # the H100 SXM's die, rates and power (datasheet)
        "v100": (125e12, 815.0, 300.0),
        "b200": (2.25e15, 800.0, 1000.0),  # each of two ~800 mm2 dies (TechInsights)
        "h200": (989e12, 814.0, 700.0),  # the H100 SXM's die and rates; 700 W (datasheet)
        "mi300x": (1307.4e12, None, 750.0),  # no published die size of an XCD or I/O die
        "tpuv5p": (459e12, None, None),  # Google publishes no die size or power
    }
)


def preset_names() -> tuple[str, ...]:
    """Names of the shipped presets, in a stable order."""
    return tuple(_PRESETS)


def preset(name: str) -> Accelerator:
    """The preset accelerator ``name``; unknown names suggest the nearest.

    Examples
    --------
    >>> preset("a100").peak_flops / 1e12
    311.86944
    """
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("accelerator preset", name, _PRESETS) from None
