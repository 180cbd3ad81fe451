"""The measured plans of gemm(variant="hopper") without a GPU: which plans are measured
for a shape (each one a valid launch plan), when a measured plan replaces the rule's,
and the file that remembers choices (kept per GPU, dtype, layout and shape; forgotten
when the kernels change; a broken file is set aside with a warning, never an error)."""

from __future__ import annotations

import json

import pytest

from fullpipe.kernels import gemm_tuning as gt
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm
from fullpipe.kernels._operands import Operand

SMS = 132  # (an H100 SXM or H200)
SHAPES = [(94, 5528, 11016), (40, 4304, 10864), (501, 2536, 6944), (4096, 4096, 4096), (8192, 8192, 8192),
          (60, 872, 1896), (739, 656, 456), (5012, 1032, 3792), (1, 8, 8), (129, 8, 8)]


@pytest.fixture(autouse=True)
def own_tuning_file(tmp_path, monkeypatch):
    monkeypatch.setenv(gt.ENV_FILE, str(tmp_path / "plans.json"))
    monkeypatch.setattr(gt, "gpu_id", lambda index: "NVIDIA H200/132 SMs")
    gt.forget()
    yield tmp_path / "plans.json"
    gt.forget()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_rule_comes_first_and_every_candidate_is_a_valid_launch(shape):
    m, n, k = shape
    plans = gt.candidates(m, n, k, SMS)
    assert plans[0] == gt.rule_plan(m, n, k, SMS) and len(set(plans)) == len(plans)
    assert (gt.GemmPlan("skinny") in plans) == (m <= skinny_gemm.MAX_ROWS)
    # clusters along N are measured where 128-row tiles would pair along M (more than one tile row)
    # and a cluster's second block has columns inside N
    assert any(p.build == hg.PERSISTENT_ALONG_N for p in plans if p.kernel == "persistent") == (m > hg.BM and n > hg.BN)
    for p in plans:
        if p.kernel == "skinny":
            skinny_gemm.plan(m, n, k, "bfloat16", 0, 0, sms=SMS, co_resident=lambda *a: 16)
            continue
        clusters = SMS // p.build.cluster
        sk = {"all": hg.cluster_tiles(m, n, p.build), "none": 0}.get(p.stream_k)
        launch = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=clusters, build=p.build, sk_tiles=sk)
        if p.stream_k == "all":  # every cluster of the GPU takes a run of K slices
            assert launch.grid == SMS // p.build.cluster * p.build.cluster and launch.sk_tiles == sk
        if p.stream_k == "none":  # whole tiles, where the rule's plan of the same build deals some out
            rule = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=clusters, build=p.build)
            assert launch.sk_tiles == 0 < rule.sk_tiles


def test_every_build_the_rules_last_step_weighs_is_measured(monkeypatch):
    """The rule's last step (hopper_gemm._fills_sooner) compares builds by a wave model; the
    tuner measures each of them, so a shape where the model picked wrong has its better build
    among the measured plans."""
    import random
    weighed = []
    wave_time = hg._wave_time
    monkeypatch.setattr(hg, "_wave_time", lambda m, n, k, sms, b: weighed.append(b) or wave_time(m, n, k, sms, b))
    rng = random.Random(60)
    for _ in range(300):
        m, n, k = rng.randint(256, 4096), 64 * rng.randint(8, 256), 64 * rng.randint(8, 256)
        for b_t in (False, True):
            weighed.clear()
            hg.default_build(m, n, k, SMS, b_transposed=b_t)
            plans = gt.candidates(m, n, k, SMS, b_transposed=b_t)
            measured = {p.build for p in plans if p.kernel == "persistent"}
            weighed_as_run = {hg.as_laid_out(b, b_t) for b in weighed}
            assert weighed_as_run <= measured, (m, n, k, b_t, {b.label for b in weighed_as_run - measured})
            # (and no kernel measured twice: each build named as b's layout runs it)
            ran = [(hg.as_laid_out(p.build, b_t), p.stream_k) for p in plans if p.kernel == "persistent"]
            assert len(set(ran)) == len(ran)


def test_the_rule_first_reads_bs_layout():
    """An odd N puts a row-major b's rows off the 32-byte sectors, not w.T's (rows of K): the
    rule's plan, first among the candidates, differs by layout (hopper_gemm.rows_on_sectors)."""
    row_major, w_t = gt.candidates(1024, 2040, 16384, SMS), gt.candidates(1024, 2040, 16384, SMS, b_transposed=True)
    assert row_major[0].build == hg.PERSISTENT and w_t[0].build == hg.as_laid_out(hg.PERSISTENT_NARROW, True)


def test_stream_k_over_every_cluster_is_measured_only_where_the_rule_leaves_clusters_idle():
    def all_sk(m, n, k):
        return {p.build.label for p in gt.candidates(m, n, k, SMS) if p.stream_k == "all"}

    # 94 rows: the rule splits the 22 tiles of 128 x 256 4 ways, 88 blocks on 132 SMs
    assert "1x1-g8" in all_sk(94, 5528, 11016)
    # 8192^3: 1024 tiles of 256 x 256 on 66 clusters leave the last wave part-empty; 128 x 64
    # tiles (4096 of them) fill waves of 132 whole: nothing idle to fill
    assert "2x1-g8" in all_sk(8192, 8192, 8192) and "1x1-g8-n64-s8" not in all_sk(8192, 8192, 8192)
    # K of 2 slices: even the smallest tiles' runs would average under MIN_SLICES_PER_CLUSTER
    assert all_sk(501, 2536, 128) == set() and "1x1-g8-m64-n64-s8" in all_sk(501, 2536, 1024)


def test_whole_tiles_are_measured_where_the_rule_deals_tiles_out():
    def whole(m, n, k):
        return {p.build.label for p in gt.candidates(m, n, k, SMS) if p.stream_k == "none"}

    # 776 x 4112 x 11096: 68 tiles of 256 x 256 on 66 clusters of two, all dealt out by the
    # rule (one wave and a bit); 128 x 128 tiles (7 x 33 = 231 of 132) are one wave and 3/4: whole
    assert "2x1-g8" in whole(776, 4112, 11096) and "1x1-g8-n128-s6" not in whole(776, 4112, 11096)
    # 94 rows, below one wave: the rule splits each tile's K
    assert "1x1-g8" in whole(94, 5528, 11016)
    # 8192^3 on 128 x 64 tiles (8192 = 62 waves of 132 and 8): the rule's last two waves;
    # 128 x 256 in clusters of 2 (1024 tiles, 15 waves of 66 and 34): whole already
    assert "1x1-g8-n64-s8" in whole(8192, 8192, 8192) and "2x1-g8" not in whole(8192, 8192, 8192)


def test_a_measured_plan_replaces_the_rules_only_beyond_the_margin():
    rule, other = gt.candidates(501, 2536, 6944, SMS)[:2]
    just_faster = 1 / (1 + gt.KEEP_MARGIN) + 0.005
    assert gt.choose({rule: 10.0, other: 10.0 * just_faster}, rule) == rule
    assert gt.choose({rule: 10.0, other: 10.0 * (1 / (1 + gt.KEEP_MARGIN) - 0.005)}, rule) == other
    assert gt.choose({rule: 10.0, other: 12.0}, rule) == rule
    assert gt.choose({other: 12.0}, rule) == other  # (the rule's plan could not run)


def test_plans_round_trip_through_json_without_the_layout():
    for shape in SHAPES:
        for p in gt.candidates(*shape, SMS):
            d = json.loads(json.dumps(p.to_json()))
            assert gt.GemmPlan.from_json(d) == p
            assert d["build"] is None or "b_k_major" not in d["build"]  # (b's layout decides at run time)
    # b = w.T: each plan comes back as the same kernel (the launch lays a build out for b's layout),
    # the 192-wide pairs among them (they exist for w.T only)
    for shape in [*SHAPES, (512, 6144, 4096), (1516, 5120, 9920)]:
        for p in gt.candidates(*shape, SMS, b_transposed=True):
            back = gt.GemmPlan.from_json(json.loads(json.dumps(p.to_json())))
            assert back.kernel == p.kernel and back.stream_k == p.stream_k
            assert p.build is None or hg.as_laid_out(back.build, True) == p.build, p.label
    with pytest.raises(ValueError, match="needs its build"):
        gt.GemmPlan("persistent")
    with pytest.raises(ValueError, match="stream_k"):
        gt.GemmPlan("persistent", hg.PERSISTENT, "some")


def _operands(m, n, k, dtype="bfloat16", transposed=False):
    a = Operand(None, 0, (m, k), dtype, 0, "torch")
    b = Operand(None, 0, (k, n), dtype, 0, "torch", transposed)
    return a, b


def test_a_saved_choice_is_found_by_gpu_dtype_layout_and_shape_in_a_new_process(own_tuning_file, monkeypatch):
    plan = gt.GemmPlan("persistent", hg.PERSISTENT, "all")
    table = gt._table()
    table.put(gt.plan_key("NVIDIA H200/132 SMs", "bfloat16", True, 776, 4112, 11096), plan, {plan: 70.0})
    table.save()
    gt.forget()
    assert gt.lookup(*_operands(776, 4112, 11096, transposed=True), 776, 4112, 11096) == plan
    for other in (_operands(776, 4112, 11096), _operands(776, 4112, 11096, "float16", True)):
        assert gt.lookup(*other, 776, 4112, 11096) is None
    assert gt.lookup(*_operands(777, 4112, 11096, transposed=True), 777, 4112, 11096) is None
    assert set(gt._UNTUNED) == {(0, "bfloat16", False, 776, 4112, 11096), (0, "float16", True, 776, 4112, 11096),
                                (0, "bfloat16", True, 777, 4112, 11096)}  # (tune_gemm()'s shapes)
    gt.forget()
    monkeypatch.setattr(gt, "gpu_id", lambda index: "NVIDIA H100 80GB HBM3/132 SMs")  # (another model: not its plan)
    assert gt.lookup(*_operands(776, 4112, 11096, transposed=True), 776, 4112, 11096) is None


def test_choices_measured_on_other_kernels_are_forgotten(own_tuning_file, monkeypatch):
    plan = gt.GemmPlan("skinny")
    table = gt._table()
    table.put(gt.plan_key("NVIDIA H200/132 SMs", "bfloat16", False, 64, 4096, 4096), plan, {plan: 9.0})
    table.save()
    gt.forget()
    monkeypatch.setattr(gt, "sources_digest", lambda: "an edited kernel")
    assert gt.lookup(*_operands(64, 4096, 4096), 64, 4096, 4096) is None


def test_a_broken_file_is_set_aside_with_a_warning_and_rewritten(own_tuning_file):
    own_tuning_file.write_text('{"version": 1, "sources": "')
    with pytest.warns(UserWarning, match="ignoring the GEMM tuning file"):
        assert gt.lookup(*_operands(64, 4096, 4096), 64, 4096, 4096) is None
    plan = gt.GemmPlan("skinny")
    gt._table().put(gt.plan_key("NVIDIA H200/132 SMs", "bfloat16", False, 64, 4096, 4096), plan, {plan: 9.0})
    gt._table().save()
    assert json.loads(own_tuning_file.read_text())["sources"] == gt.sources_digest()
    assert not [p.name for p in own_tuning_file.parent.iterdir() if p.suffix == ".tmp"]  # (no temporary file left)


@pytest.mark.parametrize("text", ["[]", "null", '{"version": 1, "plans": []}', '"plans"'])
def test_a_file_of_another_shape_is_set_aside_too(own_tuning_file, text):
    own_tuning_file.write_text(text)
    with pytest.warns(UserWarning, match="ignoring the GEMM tuning file"):
        assert gt.lookup(*_operands(64, 4096, 4096), 64, 4096, 4096) is None
    assert gt.lookup(*_operands(64, 4096, 4096), 64, 4096, 4096) is None  # (read once: no second warning)


def test_two_processes_saving_keep_each_others_plans(own_tuning_file):
    import threading

    key = lambda m: gt.plan_key("NVIDIA H200/132 SMs", "bfloat16", False, m, 4096, 4096)
    plan = gt.GemmPlan("skinny")
    first, second = gt.TunedPlans(own_tuning_file), gt.TunedPlans(own_tuning_file)  # (as two processes hold them)
    first.put(key(8), plan, {plan: 7.0})
    second.put(key(16), plan, {plan: 8.0})
    first.save()
    second.save()
    assert set(json.loads(own_tuning_file.read_text())["plans"]) == {key(8), key(16)}

    table = gt._table()  # (threads of one process saving at once)
    errors = []

    def tune(i):
        try:
            for j in range(20):
                table.put(key(100 + i * 20 + j), plan, {plan: 1.0})
                table.save()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=tune, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(json.loads(own_tuning_file.read_text())["plans"]) == 2 + 80


def test_the_tuning_file_sits_beside_the_cubin_cache_unless_named(monkeypatch, tmp_path):
    monkeypatch.delenv(gt.ENV_FILE)
    monkeypatch.setenv("FULLPIPE_CACHE_DIR", str(tmp_path / "cache"))
    assert gt.tuning_file() == tmp_path / "cache" / "gemm-tuning" / "plans.json"
    from fullpipe.cuda import compiler

    (tmp_path / "cache" / "gemm-tuning").mkdir(parents=True)
    gt.tuning_file().write_text("{}")
    compiler.clear_cache()  # (emptying the cubins keeps the measured plans)
    assert gt.tuning_file().is_file()


@pytest.mark.parametrize("kwargs, match", [
    (dict(shapes=[(64, 64)]), "each shape must be"),
    (dict(shapes=[(64, 100, 64)]), "N must be a multiple of 8 for a row-major b"),
    (dict(shapes=[(64, 64, 64)], dtype="float32"), "dtype must be one of"),
])
def test_tune_gemm_refuses_bad_input_before_touching_the_gpu(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gt.tune_gemm(**kwargs)


def test_the_stream_gate_word_only_rises_and_an_error_inside_a_hold_opens_it(monkeypatch):
    import types

    from fullpipe.cuda import device, timing

    calls = []
    monkeypatch.setattr(timing.drv, "call", lambda name, *args: calls.append((name, args[2])))
    monkeypatch.setattr(timing.drv, "driver", lambda: types.SimpleNamespace(
        CUstreamWaitValue_flags=types.SimpleNamespace(CU_STREAM_WAIT_VALUE_GEQ=0)))
    monkeypatch.setattr(device, "ensure_current", lambda index=None: None)
    gate = object.__new__(timing.StreamGate)  # (no GPU: the driver calls are recorded)
    gate._device_index, gate._writer, gate._word, gate._value, gate._opened = 0, types.SimpleNamespace(handle=7), 64, 0, 0
    stream = types.SimpleNamespace(handle=9)
    first, second = gate.hold(stream), gate.hold(stream)
    first.__enter__()
    second.__enter__()   # (two threads' holds, opened in the other order)
    second.__exit__(None, None, None)
    first.__exit__(None, None, None)
    with pytest.raises(RuntimeError), gate.hold(stream):
        raise RuntimeError("the block failed")
    writes = [v for name, v in calls if name == "cuStreamWriteValue32"]
    waits = [v for name, v in calls if name == "cuStreamWaitValue32"]
    assert waits == [1, 2, 3] and writes == [2, 3]  # (1 is opened by 2; never written after it)
