"""Every command that reads a user's file, given any bytes in any encoding, ends in one
``Error:`` line (exit 1) or a result (exit 0, 2 or 3): never a traceback.

The inputs are random bytes, a valid file of each kind re-encoded (UTF-8 with and without a
byte-order mark, UTF-16 and UTF-32 with and without one, Latin-1), and that file with its
values replaced by random JSON/TOML values, keys dropped or added, then encoded so.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from budget import budget
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spaces import space_toml

from phaze.cli import cli
from phaze_common.errors import ConfigError
from phaze_common.files import decode_text, read_json, read_toml

# A two-block GPT-2: every command on it takes milliseconds.
_MODEL = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 2,
    "n_inner": 256,
    "vocab_size": 128,
    "n_positions": 256,
    "activation_function": "gelu_new",
    "tie_word_embeddings": True,
}
_PLACE = {
    "maxMemoryPerDevice": 2**31,
    "maxDevices": 4,
    "bandwidth": 25e9,
    "mbsInBatch": 4,
    "activationRecomputation": False,
    "optimizerAlgorithm": "Adam",
    "nodes": {
        "1": [
            {
                "id": i,
                "parameterSize": 1e6,
                "activationSize": 1e5,
                "optimalLatencyFw": 1e-4,
                "optimalLatencyBw": 2e-4,
                "isTensorParallelized": False,
            }
            for i in range(3)
        ]
    },
    "edges": {"1": [{"sourceId": i, "destId": i + 1, "communicationCost": 1e5} for i in range(2)]},
}
_ARCH = (Path(__file__).parents[1] / "examples" / "accelerator_v100.toml").read_text()
_SPACE = space_toml("fuzz", num_tc=(1, 2), tc_rows=(32,))
# A sweep that fails once its config is read: its --out is below a regular file.
_SWEEP = """\
[sweep]
workloads = ["gpt3-125m"]
space = "tiny"
devices = 8
global_batch = 8
micro_batches = [1]
recompute = ["none"]
hbm_gib = [16]

[scoring]
pue = 1.1
host_profile = "dgx-a100"
"""

ENCODINGS = ("utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1")


def _json_text(doc) -> str:
    return json.dumps(doc, indent=1)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return (
            "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        )
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def _toml_text(doc: dict) -> str:
    """A TOML document of tables of values (what the readers here take)."""
    out = []
    for table, body in doc.items():
        if not isinstance(body, dict):
            out.append(f"{json.dumps(table)} = {_toml_value(body)}")
            continue
        out.append(f"[{json.dumps(table)}]")
        out += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n"


# One device, one short sequence, a fixed strategy: an evaluation in milliseconds.
_ONE_DEVICE = ["--devices", "1", "--global-batch", "1", "--seq-len", "64"]
_ONE_DEVICE += ["--strategy", "t=1,p=1,d=1,mbs=1,recompute=none,zero=0"]

# (command line with {} for the file, suffix, valid document, its serialiser)
READERS = {
    "workloads show": (["workloads", "show", "{}"], ".json", _MODEL, _json_text),
    "evaluate --workload": (
        ["evaluate", "--workload", "{}", "--arch", "a100", *_ONE_DEVICE],
        ".json",
        _MODEL,
        _json_text,
    ),
    "schedule --workload": (
        ["schedule", "--workload", "{}", "--arch", "a100", "--solver", "list"],
        ".json",
        _MODEL,
        _json_text,
    ),
    "place": (["place", "{}"], ".json", _PLACE, _json_text),
    "arch show": (["arch", "show", "{}"], ".toml", None, _toml_text),
    "evaluate --arch": (
        [
            "evaluate",
            "--workload",
            "gpt3-125m",
            "--precision",
            "fp16",
            "--arch",
            "{}",
            *_ONE_DEVICE,
        ],
        ".toml",
        None,
        _toml_text,
    ),
    "space show": (["space", "show", "{}"], ".toml", None, _toml_text),
    "sweep": (["sweep", "{}", "--out", "{file}/out", "--no-report"], ".toml", None, _toml_text),
}
_TOML_TEXT = {"arch show": _ARCH, "evaluate --arch": _ARCH, "space show": _SPACE, "sweep": _SWEEP}


def _document(name: str):
    _, _, doc, _ = READERS[name]
    return doc if doc is not None else tomllib.loads(_TOML_TEXT[name])


def _run(name: str, data: bytes, tmp: Path):
    args, suffix, _, _ = READERS[name]
    path = tmp / f"input{suffix}"
    path.write_bytes(data)
    blocker = tmp / "a-file"
    blocker.write_text("")
    argv = [a.replace("{}", str(path)).replace("{file}", str(blocker)) for a in args]
    return CliRunner().invoke(cli, argv)


def _no_traceback(r) -> None:
    """Exit 0-3 through click (no exception escaped); a failure is one ``Error:`` line."""
    assert isinstance(r.exception, SystemExit | None), (r.output, r.exception)
    assert r.exit_code in (0, 1, 2, 3), r.output
    assert "Traceback" not in r.output, r.output
    if r.exit_code == 1:
        errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, r.output


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


def _toml_safe(v):
    """TOML has no null: a None becomes an empty array."""
    if v is None:
        return []
    if isinstance(v, list):
        return [_toml_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: _toml_safe(x) for k, x in v.items()}
    return v


@st.composite
def _mutated(draw, name: str) -> bytes:
    """The valid document of ``name`` with some values replaced, keys dropped or added."""
    _, _, _, dump = READERS[name]
    doc = json.loads(json.dumps(_document(name)))  # a deep copy
    tables = [doc] + [v for v in doc.values() if isinstance(v, dict)]
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from(tables))
        action = draw(st.sampled_from(("replace", "drop", "add")))
        if action == "add" or not table:
            key = draw(st.text(min_size=1, max_size=8))
        else:
            key = draw(st.sampled_from(sorted(table)))
        if action == "drop":
            table.pop(key, None)
        else:
            table[key] = draw(_VALUES)
    if dump is _toml_text:
        doc = _toml_safe(doc)
    text = dump(doc)
    try:
        return text.encode(draw(st.sampled_from(ENCODINGS)))
    except UnicodeEncodeError:  # a surrogate or a character Latin-1 lacks
        return text.encode("utf-8", errors="surrogatepass")


def _valid_bytes(name: str) -> str:
    _, _, doc, dump = READERS[name]
    return dump(doc) if doc is not None else _TOML_TEXT[name]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", sorted(READERS))
def test_a_valid_file_in_any_encoding_is_read_or_named(name, encoding, tmp_path):
    """With a byte-order mark the file is read as meant; without one, UTF-8 is read and any
    other encoding is one error naming the file."""
    r = _run(name, _valid_bytes(name).encode(encoding), tmp_path)
    _no_traceback(r)
    if encoding in ("utf-8", "utf-8-sig", "utf-16", "utf-32", "latin-1"):  # latin-1: ASCII
        if name == "sweep":  # read and checked; then its --out cannot be made
            assert r.exit_code == 1 and "a-file" in r.output, r.output
        else:
            assert r.exit_code == 0, r.output
    else:
        assert r.exit_code == 1 and "input" in r.output and "UTF-8" in r.output, r.output


@pytest.mark.parametrize("name", sorted(READERS))
@budget(40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bytes_end_in_one_error_line_or_a_result(name, data, tmp_path):
    raw = data.draw(st.binary(max_size=200) | _mutated(name), label="file")
    _no_traceback(_run(name, raw, tmp_path))


@settings(max_examples=100)
@given(
    raw=st.binary(max_size=64),
    bom=st.sampled_from((b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")),
)
def test_decoding_gives_text_or_one_config_error(raw, bom):
    try:
        text = decode_text(bom + raw, "f")
    except ConfigError as e:
        assert str(e).startswith("f: ") and "UTF" in str(e)
    else:
        assert isinstance(text, str)


def test_utf16_json_and_toml_read_as_written(tmp_path):
    j, t = tmp_path / "m.json", tmp_path / "s.toml"
    j.write_text(json.dumps(_MODEL), encoding="utf-16")
    t.write_text(_SPACE, encoding="utf-16")
    assert read_json(j) == _MODEL
    assert read_toml(t)["space"]["name"] == "fuzz"
    t.write_bytes(b"\xff\xfe" + b"\x00\xd8")  # a UTF-16 mark, then half a surrogate pair
    with pytest.raises(ConfigError, match=r"s\.toml: starts with a UTF-16 byte-order mark"):
        read_toml(t)
    t.write_bytes(b"a = '\xe9'")
    with pytest.raises(ConfigError, match=r"s\.toml: not UTF-8 text \(byte 0xe9 at offset 5\)"):
        read_toml(t)
    j.write_text("[" * 100_000)
    with pytest.raises(ConfigError, match="m.json"):
        read_json(j)
