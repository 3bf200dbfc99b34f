"""Shipped latency profiles: they load, match their derivation, and are plausible."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from augserve.core.latency import LatencyProfile
from augserve.profiles import derive, list_profiles, load_profile, setups
from augserve.profiles import load as sim_profiles

SHIPPED = ["gptj-6b-rtx4090", "llama3-70b-4xa100", "opt-13b-h800", "vicuna-13b-2xa100"]
CALIBRATED = sorted(derive.CALIBRATED)
SETUPS = {s.name: s for s in setups.SETUPS}
TIME_TERMS = ("c0", "c_prefill", "c_attn", "c_decode", "c_ctx")


def test_list_profiles_names_the_four_setups_and_the_calibrated_ones() -> None:
    assert "opt-13b-h800-paper" in CALIBRATED
    assert list_profiles() == sorted(SHIPPED + CALIBRATED)


@pytest.mark.parametrize("name", CALIBRATED)
def test_calibrated_profile_is_its_roofline_with_every_time_term_scaled(name: str) -> None:
    base_name, scale = derive.CALIBRATED[name]
    base, p = load_profile(base_name), load_profile(name)
    shipped = (derive.PROFILE_DIR / f"{name}.json").read_text(encoding="utf-8")
    assert shipped == derive.render(derive.scaled_profile(base, name, scale)), (
        f"{name}.json drifted; run `python -m augserve.profiles.derive`"
    )
    for term in TIME_TERMS:
        assert getattr(p, term) == pytest.approx(getattr(base, term) * scale, rel=1e-3)
    assert p.swap_time(1000) == pytest.approx(base.swap_time(1000) * scale, rel=1e-3)
    assert p.decode_iter_time() == pytest.approx(base.decode_iter_time() * scale, rel=1e-3)
    for same in ("kv_bytes", "device_kv_bytes", "host_kv_bytes", "max_batch_tokens"):
        assert getattr(p, same) == getattr(base, same)
    assert "calibrated" in p.description and f"x {scale:g}" in p.description


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads(name: str) -> None:
    profile = load_profile(name)
    assert isinstance(profile, LatencyProfile)
    assert profile.name == name
    assert "roofline" in profile.description


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_file_equals_derivation(name: str) -> None:
    shipped = (derive.PROFILE_DIR / f"{name}.json").read_text(encoding="utf-8")
    assert shipped == derive.render(derive.derive_profile(SETUPS[name])), (
        f"{name}.json drifted; run `python -m augserve.profiles.derive`"
    )


def test_derive_check_mode_reports_up_to_date(tmp_path: Path) -> None:
    assert derive.main(["--check"]) == 0
    assert derive.main(["--check", "--out", str(tmp_path)]) == 1
    assert derive.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted(SHIPPED + CALIBRATED)
    assert load_profile(tmp_path / "opt-13b-h800.json") == load_profile("opt-13b-h800")


@pytest.mark.parametrize("name", SHIPPED)
def test_kv_bytes_matches_formula(name: str) -> None:
    m = SETUPS[name].model
    expected = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 2
    assert load_profile(name).kv_bytes == expected


def test_kv_bytes_known_values() -> None:
    kv = {n: load_profile(n).kv_bytes for n in SHIPPED}
    assert kv["gptj-6b-rtx4090"] == 458_752  # 2 * 28 * 16 * 256 * 2
    assert kv["opt-13b-h800"] == 819_200  # 2 * 40 * 40 * 128 * 2
    assert kv["vicuna-13b-2xa100"] == 819_200
    assert kv["llama3-70b-4xa100"] == 327_680  # GQA: 2 * 80 * 8 * 128 * 2


def test_parameter_counts_match_published_sizes() -> None:
    published = {
        "GPT-J-6B": 6.05e9,
        "OPT-13B": 12.85e9,
        "Vicuna-13B": 13.02e9,
        "Llama-3-70B-Instruct": 70.55e9,
    }
    for s in setups.SETUPS:
        assert s.model.total_params() == pytest.approx(published[s.model.name], rel=0.01)


@pytest.mark.parametrize("name", SHIPPED)
def test_sanity_ranges(name: str) -> None:
    p = load_profile(name)
    assert 0.005 <= p.decode_iter_time() <= 0.080
    assert 0.02 <= p.prefill_time(1000) <= 0.5
    assert p.prefill_time(1000) > p.decode_iter_time()
    tokens = p.device_kv_bytes // p.kv_bytes
    assert 10_000 <= tokens <= 1_000_000
    gpu = SETUPS[name].gpu
    assert p.device_kv_bytes < SETUPS[name].tp * gpu.memory_bytes * 0.9
    assert 1e9 <= p.swap_bandwidth <= 4 * 64e9
    assert 100 <= p.max_batch_tokens <= 2048
    # the link swaps at least one token per iteration on its own (swap_tokens_per_iter()
    # clamps to 1, so asserting on it could not fail)
    assert p.swap_bandwidth * p.decode_iter_time() / p.kv_bytes >= 1


def test_known_measurement_anchors() -> None:
    # OPT-13B decode at batch 1 on one A100 80 GB is about 20-25 ms per token.
    opt_a100 = setups.Setup("x", setups.OPT_13B, setups.A100_80, 1, 1500, setups.HOST_SWAP)
    assert 0.018 <= derive.derive_profile(opt_a100).decode_iter_time() <= 0.025
    # H800 is faster; GPT-J-6B weights (~12 GB) leave ~9-10 GB of KV on a 4090.
    assert load_profile("opt-13b-h800").decode_iter_time() < 0.018
    gptj = load_profile("gptj-6b-rtx4090")
    assert 8e9 <= gptj.device_kv_bytes <= 11e9


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    data = load_profile("opt-13b-h800").to_dict()
    del data["c_prefill"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"bad\.json.*c_prefill"):
        load_profile(bad)


def test_wrong_type_names_file_and_field(tmp_path: Path) -> None:
    data = load_profile("opt-13b-h800").to_dict()
    data["kv_bytes"] = "lots"
    bad = tmp_path / "typed.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"typed\.json.*kv_bytes"):
        load_profile(str(bad))


def test_negative_value_names_file_and_field(tmp_path: Path) -> None:
    data = load_profile("opt-13b-h800").to_dict()
    data["c0"] = -1.0
    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"neg\.json.*c0"):
        load_profile(bad)


def test_corrupt_json_names_file(tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.json"
    bad.write_text('{"name": "x", "c0": ')
    with pytest.raises(ValueError, match=r"corrupt\.json"):
        load_profile(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"corrupt\.json.*object"):
        load_profile(bad)


def test_missing_file_names_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.json"):
        load_profile(tmp_path / "nope.json")


def test_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError, match="unknown profile 'opt-13b-a100'") as info:
        load_profile("opt-13b-a100")
    for name in SHIPPED:
        assert name in str(info.value)


def test_type_table_covers_every_field() -> None:
    typed = {*sim_profiles._FLOAT_FIELDS, *sim_profiles._INT_FIELDS, *sim_profiles._STR_FIELDS}
    assert typed == {f.name for f in dataclasses.fields(LatencyProfile)}


def test_docs_table_matches_derivation() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "profiles.md"
    table = derive.table(derive.roofline_profiles() + derive.calibrated_profiles())
    assert table in docs.read_text(encoding="utf-8"), "update docs/profiles.md from --table"
