"""What a real chip sustains beside its peaks: per-preset measurements for the op model.

Each preset's chip file (``[devices]`` of ``arch_space/data/chips/<name>.toml``, read as the
``[<name>]`` table of ``devices.toml`` beside its ``[generic]``) holds the sustained share of the tensor-core
peak a GEMM reaches, the share of the chip's compute a collective holds while it runs beside
other ops, the collective bus bandwidth measured at each message size inside one node (and
an inference engine's own all-reduce where measured), and the parameters fitted where no
measurement exists (each with its source). A design gets a
preset's table when it equals the preset in every field the op model reads (its name and HBM
capacity aside), so the timing copies of a preset that drop those fields keep it; every other
design that is not a preset and names none as ``measured_as`` gets the ``generic`` table (:func:`generic_profile`): a
sustained tensor share derived from the measured ones, so that a searched design does not
run its GEMMs at a peak no measured chip reaches; a preset without a table runs at its
modelled rates (:data:`MODELLED`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, Final

import numpy as np

from arch_space._data import shipped_toml
from arch_space.accelerator import Accelerator
from arch_space.formats import BASE_FORMAT
from arch_space.perf.gemm_shape import GemmShapeTable, gemm_shape_table
from arch_space.perf.residual import design_clock_residual
from arch_space.power_limit import preset_board_limit_w
from arch_space.presets import preset, preset_names
from phaze_common.errors import ConfigError, unknown_name
from workloads.ops import ATTENTION_KERNELS, FORMATS

__all__ = [
    "CollectiveCurve",
    "DeviceProfile",
    "MODELLED",
    "FITTED_NAMES",
    "device_profile",
    "generic_profile",
    "preset_profile",
    "profile_from_mapping",
    "custom_all_reduce_curve",
]

_DATA_FILE: Final = "devices.toml"
_GENERIC: Final = "generic"
_CLOCK: Final = "sustained_clock_fraction"
_SHARE: Final = "sustained_tensor_fraction"
_MEASURED_AS: Final = "measured_as"
#: The parameters a preset may have fitted (at most these three, never per case).
FITTED_NAMES: Final = ("sustained_clock_fraction", "collective_compute_share")


@dataclass(frozen=True, slots=True)
class CollectiveCurve:
    """Measured ring bus bandwidth by message size on one node's links.

    ``size_bytes`` ascend; ``devices`` is the group the curve was measured on;
    ``ring_busbw_bytes_per_s`` caps the collectives other than the all-reduce (in-switch
    reduction speeds up the all-reduce alone), ``inf`` when it does not.
    """

    line_rate_bytes_per_s: float
    size_bytes: tuple[float, ...]
    busbw_bytes_per_s: tuple[float, ...]
    ring_busbw_bytes_per_s: float = math.inf
    devices: int = 8

    def efficiency(self, nbytes: np.ndarray, all_reduce: np.ndarray) -> np.ndarray:
        """Bus bandwidth over the line rate for collectives of ``nbytes`` (full tensor).

        Log-log interpolation between the measured sizes, held at the largest; below the
        smallest size the bandwidth falls with the size so the time stays the smallest's.
        A larger message never takes less time: each size's time is at least every smaller
        size's (the measurements are noisy by a few per cent where the curve is steep).
        """
        logs, logbw, smallest, smallest_s = _log_table(self.size_bytes, self.busbw_bytes_per_s)
        s = np.maximum(nbytes, 1.0)
        bw = np.exp(np.interp(np.log(s), logs, logbw))
        bw = np.where(s < smallest, s / smallest_s, bw)
        bw = np.where(all_reduce, bw, np.minimum(bw, self.ring_busbw_bytes_per_s))
        return bw / self.line_rate_bytes_per_s

    def p2p_efficiency(self, nbytes: np.ndarray) -> np.ndarray:
        """Bandwidth over the line rate of one point-to-point send of ``nbytes``.

        A ring collective of ``S`` bytes over ``n`` devices is ``n - 1`` (or ``2 (n - 1)``)
        steps in which each device sends an ``S / n`` chunk to its neighbour, and its bus
        bandwidth is the rate of one such send; so a send of ``B`` bytes runs at the ring
        bus bandwidth of the measured collective of ``devices * B`` bytes.
        """
        b = np.asarray(nbytes, dtype=np.float64)
        return self.efficiency(self.devices * b, np.zeros(b.shape, dtype=bool))


@lru_cache(maxsize=64)
def _log_table(
    size_bytes: tuple[float, ...], busbw_bytes_per_s: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """A curve's log sizes and log bandwidths (each size's time at least every smaller
    size's), its smallest size and that size's time: computed once per curve, not on each of
    the placement search's many collectives (read-only arrays)."""
    sizes = np.asarray(size_bytes)
    times = np.maximum.accumulate(sizes / np.asarray(busbw_bytes_per_s))
    logs = np.log(sizes)
    logbw = np.log(sizes / times)
    logs.flags.writeable = logbw.flags.writeable = False
    return logs, logbw, sizes[0], times[0]


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """The sustained rates of one chip; :data:`MODELLED` changes nothing.

    ``sustained_tensor_fraction`` caps a GEMM's rate at that share of the tensor-core peak;
    ``sustained_clock_fraction`` scales every core's clock in a training run (a clock held
    down by the power cap while the links and memory are busy, against the clock of one
    device running a benchmark alone: :meth:`alone`); ``attention_forward_fraction`` and
    ``attention_backward_fraction`` cap a fused attention kernel's matmul FLOP rate at that
    share of the tensor-core peak (the best fused kernel measured on the chip);
    ``flash2_forward_fraction`` and ``flash2_backward_fraction`` are FlashAttention-2's own
    measured shares where they differ (None: the same), taken by a stack that runs it
    (:meth:`for_attention`); ``collective_compute_share`` is the share of the compute a collective holds while it
    runs beside other ops; ``gemm_shapes`` the measured GEMM rate by shape, which derates a
    bf16 GEMM below the best shape's share (:class:`~arch_space.perf.gemm_shape.GemmShapeTable`),
    ``format_gemm_shapes`` the same for a narrower format's GEMMs (fp8) by format; ``intra_node`` the measured collective bandwidth inside a node,
    ``custom_all_reduce`` an inference engine's own all-reduce there (:meth:`for_serving`).
    ``attention_kernels`` the attention kernels the chip runs (a fused kernel built for later
    architectures does not run on it; :meth:`runs_attention`).
    ``fitted`` names the parameters that were fitted and ``provenance`` says to what.
    ``board_limit_w`` is the board's power limit (a preset's, ``system.toml``): the op
    model holds each op's energy to it times the op's time (the sustained rates above
    already include the throttling that keeps a real board there); ``inf`` for none.
    """

    name: str = ""
    sustained_tensor_fraction: float = 1.0
    sustained_clock_fraction: float = 1.0
    attention_forward_fraction: float = 1.0
    attention_backward_fraction: float = 1.0
    flash2_forward_fraction: float | None = None
    flash2_backward_fraction: float | None = None
    collective_compute_share: float = 0.0
    intra_node: CollectiveCurve | None = None
    custom_all_reduce: CollectiveCurve | None = None
    fitted: tuple[str, ...] = ()
    provenance: str = ""
    board_limit_w: float = math.inf
    format_fractions: tuple[tuple[str, float], ...] = ()
    gemm_shapes: GemmShapeTable | None = None
    format_gemm_shapes: tuple[tuple[str, GemmShapeTable], ...] = ()
    attention_kernels: tuple[str, ...] = ATTENTION_KERNELS

    def runs_attention(self, kernel: str) -> bool:
        """Whether the chip runs the attention kernel ``kernel``
        (:data:`workloads.ops.ATTENTION_KERNELS`; every chip runs ``unfused``)."""
        return kernel in self.attention_kernels

    def format_fraction(self, fmt: str) -> float:
        """The sustained share of the tensor peak in ``fmt`` (``format_fractions``, measured
        per format like ``sustained_tensor_fraction``; that one for a format without)."""
        return dict(self.format_fractions).get(fmt, self.sustained_tensor_fraction)

    def shapes_of(self, fmt: str) -> GemmShapeTable | None:
        """The measured rate-by-shape table of ``fmt``'s GEMMs: ``gemm_shapes`` for the base
        format, ``format_gemm_shapes`` for another; None where none was measured."""
        if fmt == BASE_FORMAT:
            return self.gemm_shapes
        return dict(self.format_gemm_shapes).get(fmt)

    def alone(self) -> DeviceProfile:
        """The device running one benchmark kernel alone, at its benchmark clock."""
        return dataclasses.replace(self, sustained_clock_fraction=1.0)

    def for_attention(self, kernel: str) -> DeviceProfile:
        """The device under a stack whose fused attention is ``kernel``
        (:data:`workloads.ops.ATTENTION_KERNELS`): ``flash2`` caps the fused attention
        at FlashAttention-2's measured shares where the chip has them; every other kernel
        keeps the chip's best fused rate (an unfused core has no fused op to cap)."""
        if kernel != "flash2":
            return self
        return dataclasses.replace(
            self,
            attention_forward_fraction=_or(
                self.flash2_forward_fraction, self.attention_forward_fraction
            ),
            attention_backward_fraction=_or(
                self.flash2_backward_fraction, self.attention_backward_fraction
            ),
        )

    def for_serving(self) -> DeviceProfile:
        """The device under an inference engine whose all-reduce is ``custom_all_reduce``:
        inside a node, collectives up to its largest measured size run at its bus bandwidth,
        larger ones at ``intra_node``'s (unchanged without a measurement)."""
        custom, nccl = self.custom_all_reduce, self.intra_node
        if custom is None:
            return self
        if nccl is not None:
            largest = custom.size_bytes[-1]
            points = zip(nccl.size_bytes, nccl.busbw_bytes_per_s, strict=True)
            above = [(s, b) for s, b in points if s > largest]
            scale = custom.line_rate_bytes_per_s / nccl.line_rate_bytes_per_s
            custom = dataclasses.replace(
                custom,
                size_bytes=custom.size_bytes + tuple(s for s, _ in above),
                busbw_bytes_per_s=custom.busbw_bytes_per_s + tuple(b * scale for _, b in above),
                ring_busbw_bytes_per_s=nccl.ring_busbw_bytes_per_s * scale,
            )
        return dataclasses.replace(self, intra_node=custom)


MODELLED: Final = DeviceProfile()


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


_FRACTIONS: Final = (
    "sustained_tensor_fraction",
    "sustained_clock_fraction",
    "attention_forward_fraction",
    "attention_backward_fraction",
    "flash2_forward_fraction",
    "flash2_backward_fraction",
)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _curve(data: Mapping[str, Any], owner: str, problems: list[str]) -> CollectiveCurve | None:
    sizes = data.get("size_bytes", ())
    bws = data.get("busbw_bytes_per_s", ())
    line = data.get("line_rate_bytes_per_s")
    ring = data.get("ring_busbw_bytes_per_s", math.inf)
    devices = data.get("devices")
    if not (isinstance(devices, int) and not isinstance(devices, bool) and devices >= 2):
        problems.append(
            f"{owner}.intra_node: devices = {devices!r} must be the integer >= 2 of devices "
            "the curve was measured on"
        )
    ok = (
        len(sizes) == len(bws) >= 2
        and all(_number(x) and x > 0 for x in (*sizes, *bws))
        and all(a < b for a, b in zip(sizes, sizes[1:], strict=False))
    )
    if not ok:
        problems.append(
            f"{owner}.intra_node: size_bytes and busbw_bytes_per_s must be equally long lists "
            "(at least 2) of positive numbers, sizes ascending"
        )
    for key, v in (("line_rate_bytes_per_s", line), ("ring_busbw_bytes_per_s", ring)):
        if not (_number(v) or v == math.inf) or v <= 0:
            problems.append(f"{owner}.intra_node: {key} = {v!r} must be a positive number")
    if problems:
        return None
    return CollectiveCurve(
        float(line), tuple(map(float, sizes)), tuple(map(float, bws)), float(ring), int(devices)
    )


def _latency_curve(
    data: Mapping[str, Any], owner: str, problems: list[str]
) -> CollectiveCurve | None:
    """An all-reduce measured as latency by message size, as the bus bandwidth of the
    nccl-tests convention: ``2 (n - 1) / n x size / latency``."""
    sizes, latencies = data.get("size_bytes", ()), data.get("latency_s", ())
    devices = data.get("devices")
    if not (len(latencies) == len(sizes) and all(_number(x) and x > 0 for x in latencies)):
        problems.append(
            f"{owner}.custom_all_reduce: latency_s must list a positive time per size_bytes"
        )
    if not (isinstance(devices, int) and not isinstance(devices, bool) and devices >= 2):
        devices = 2  # _curve names the problem
    factor = 2 * (devices - 1) / devices
    points = zip(sizes, latencies, strict=False)  # unequal lengths are named above
    busbw = [factor * s / t for s, t in points if _number(t) and t > 0]
    table = {k: v for k, v in data.items() if k != "latency_s"}
    return _curve({**table, "busbw_bytes_per_s": busbw}, f"{owner}.custom_all_reduce", problems)


def custom_all_reduce_curve(data: Mapping[str, Any], owner: str) -> CollectiveCurve:
    """An engine's all-reduce measured as latency by message size (``devices``,
    ``line_rate_bytes_per_s``, ``size_bytes``, ``latency_s``), as a curve; every problem
    named in one ConfigError."""
    problems: list[str] = []
    curve = _latency_curve(data, owner, problems)
    if curve is None:
        raise ConfigError(f"{owner}: " + "; ".join(problems))
    return curve


def profile_from_mapping(name: str, data: Mapping[str, Any], owner: str) -> DeviceProfile:
    """The profile of preset ``name`` from one table of ``devices.toml`` (or a calibration
    file's), every problem named in one ConfigError."""
    problems: list[str] = []
    known = {
        *_FRACTIONS,
        "collective_compute_share",
        "intra_node",
        "custom_all_reduce",
        "fitted",
        "format_tensor_fraction",
        "gemm_shapes",
        "format_gemm_shapes",
        "attention_kernels",
    }
    for key in data:
        if key not in known:
            problems.append(f"{owner}: {unknown_name('key', key, known)}")
    values: dict[str, Any] = {}
    fitted = dict(data.get("fitted", {}))
    provenance = str(fitted.pop("provenance", ""))
    for key in fitted:
        if key not in FITTED_NAMES:
            problems.append(f"{owner}.fitted: {unknown_name('parameter', key, FITTED_NAMES)}")
    for key in (*_FRACTIONS, "collective_compute_share"):
        if key in data and key in fitted:
            problems.append(f"{owner}: {key} is both measured and fitted; give it once")
        v = fitted.get(key, data.get(key))
        if v is None:
            continue
        if not _number(v) or not 0 < v <= 1:
            where = f"{owner}.fitted" if key in fitted else owner
            problems.append(f"{where}: {key} = {v!r} must be in (0, 1]")
        values[key] = v
    per_format = dict(data.get("format_tensor_fraction", {}))
    for fmt, v in per_format.items():
        if fmt not in FORMATS or not _number(v) or not 0 < v <= 1:
            problems.append(
                f"{owner}: format_tensor_fraction {fmt} = {v!r} must be a format of "
                f"{', '.join(FORMATS)} with a share in (0, 1]"
            )
    kernels = tuple(data.get("attention_kernels", ATTENTION_KERNELS))
    if "unfused" not in kernels or not set(kernels) <= set(ATTENTION_KERNELS):
        problems.append(
            f"{owner}: attention_kernels = {list(kernels)!r} must list kernels of "
            f"{', '.join(ATTENTION_KERNELS)}, unfused among them"
        )
    curve = _curve(data["intra_node"], owner, problems) if "intra_node" in data else None
    custom = data.get("custom_all_reduce")
    custom = _latency_curve(custom, owner, problems) if custom is not None else None
    shapes = data.get("gemm_shapes")
    shapes = gemm_shape_table(shapes, owner, problems) if shapes is not None else None
    by_format = []
    for fmt, table in dict(data.get("format_gemm_shapes", {})).items():
        if fmt not in FORMATS or fmt == BASE_FORMAT or not isinstance(table, Mapping):
            others = ", ".join(f for f in FORMATS if f != BASE_FORMAT)
            problems.append(f"{owner}: format_gemm_shapes {fmt} must be a table of {others}")
            continue
        shaped = gemm_shape_table(table, f"{owner}.format_gemm_shapes.{fmt}", problems)
        if shaped is not None:
            by_format.append((fmt, shaped))
    if problems:
        raise ConfigError("; ".join(problems))
    return DeviceProfile(
        name=name,
        intra_node=curve,
        custom_all_reduce=custom,
        fitted=tuple(k for k in FITTED_NAMES if k in fitted),
        provenance=provenance,
        board_limit_w=preset_board_limit_w(name),
        format_fractions=tuple(sorted((f, float(v)) for f, v in per_format.items())),
        gemm_shapes=shapes,
        format_gemm_shapes=tuple(sorted(by_format)),
        attention_kernels=kernels,
        **{k: float(v) for k, v in values.items()},
    )


@cache
def generic_profile() -> DeviceProfile:
    """The shipped profile of a design without measurements (``[generic]``): measured
    shares, the GEMM rate by shape of the preset it names, nothing fitted to one chip's runs,
    and a training clock that pays the fitted presets' mean residual beyond its power cap
    (:mod:`arch_space.perf.residual`)."""
    data = shipped_toml(_DATA_FILE)
    table = dict(data[_GENERIC])
    # a design's GEMMs lose what a measured chip's do by shape: the preset named here
    shapes_of = table.get("gemm_shapes")
    if isinstance(shapes_of, str):
        if "gemm_shapes" not in data.get(shapes_of, {}):
            raise ConfigError(
                f"{_DATA_FILE} [{_GENERIC}]: gemm_shapes = {shapes_of!r} must name a preset "
                "with a [<preset>.gemm_shapes] table"
            )
        table["gemm_shapes"] = data[shapes_of]["gemm_shapes"]
    profile = profile_from_mapping(_GENERIC, table, f"{_DATA_FILE} [{_GENERIC}]")
    if profile.fitted:
        raise ConfigError(
            f"{_DATA_FILE} [{_GENERIC}]: fits {', '.join(profile.fitted)}; a design without "
            "measurements takes no parameter fitted to one chip's runs"
        )
    if _CLOCK in table:
        raise ConfigError(
            f"{_DATA_FILE} [{_GENERIC}]: {_CLOCK} = {table[_CLOCK]!r} is not set here; a "
            "design's training clock pays the fitted presets' mean residual "
            "(arch_space.perf.residual)"
        )
    return dataclasses.replace(profile, sustained_clock_fraction=design_clock_residual())


@cache
def preset_profile(name: str) -> DeviceProfile:
    """The shipped profile of preset ``name``; a preset without one, or whose table gives
    no measured GEMM share, runs at its modelled rates (:data:`MODELLED`) but for its GEMMs,
    capped at :func:`generic_profile`'s share as any unmeasured chip (the per-MAC energies of
    ``tech.toml`` are fitted to TPU v4's board power at that share). A preset without a fitted training clock pays the design residual
    (:func:`arch_space.perf.residual.design_clock_residual`) as a searched design does."""
    if name not in preset_names():
        raise unknown_name("accelerator preset", name, preset_names())
    data = shipped_toml(_DATA_FILE)
    if _MEASURED_AS in data.get(name, {}):
        return dataclasses.replace(preset_profile(_measured_as(name, data)), name=name)
    if name not in data:
        return dataclasses.replace(
            MODELLED,
            name=name,
            sustained_tensor_fraction=generic_profile().sustained_tensor_fraction,
            sustained_clock_fraction=design_clock_residual(),
            board_limit_w=preset_board_limit_w(name),
        )
    profile = profile_from_mapping(name, data[name], f"arch_space/data/chips/{name}.toml [devices]")
    if _SHARE not in data[name]:  # no measured GEMM share: an unmeasured chip's GEMMs
        share = generic_profile().sustained_tensor_fraction
        profile = dataclasses.replace(profile, sustained_tensor_fraction=share)
    if _CLOCK in profile.fitted or _CLOCK in data[name]:
        return profile
    return dataclasses.replace(profile, sustained_clock_fraction=design_clock_residual())


def _measured_as(name: str, data: Mapping[str, Any]) -> str:
    """The preset whose table stands for preset ``name``'s (``measured_as``): the same
    silicon, clock, links and board power, measured where ``name`` was not."""
    table, of = data[name], data[name][_MEASURED_AS]
    if set(table) != {_MEASURED_AS} or of not in preset_names() or _MEASURED_AS in data.get(of, {}):
        raise ConfigError(
            f"{_DATA_FILE} [{name}]: {_MEASURED_AS} = {of!r} must be the table's only key and "
            "name a preset with a table of its own"
        )
    return str(of)


def _op_model_fields(acc: Accelerator) -> Accelerator:
    return dataclasses.replace(acc, name="", hbm_bytes=1)


@lru_cache(maxsize=256)
def device_profile(acc: Accelerator) -> DeviceProfile:
    """The profile the preset ``acc`` is measured as (``measured_as``) has, else of the
    preset ``acc`` equals in every field the op model reads, else :func:`generic_profile`."""
    if acc.measured_as:
        return device_profile(preset(acc.measured_as))
    mine = _op_model_fields(acc)
    for name in preset_names():
        if _op_model_fields(preset(name)) == mine:
            return preset_profile(name)
    return generic_profile()
