"""Several processes on the CPU (gloo): ``encdec train`` under ``accelerate launch`` and torchrun, FSDP, the checks.

Two launches of two processes do all the multi-process work (each start-up costs seconds on this machine):

1. ``accelerate launch --config_file configs/accelerate/cpu-2proc.yaml -m encdec train`` on a tiny Transformer run
   (4 steps of 2 x 8 pairs, a checkpoint at step 4, BLEU at the end);
2. ``torchrun --nproc_per_node 2 tests/distributed_worker.py batch``: that run resumed for one more step, a tiny
   RNN run, the 2-process evaluation of the first run's folder, the DDP check of every model variant, and FSDP
   training of both families.

The one-process references run here, in the test process. What is compared and the tolerances:

- final parameters, 2 processes x batch B vs 1 process x batch 2B: max |difference| <= PARAM_ATOL (1e-5; observed
  ~1e-7 after 4 AdamW steps). The two runs see the same pairs in the same steps (the seedable sampler's permutation
  does not depend on the number of processes, and Accelerate deals step k's batches 2k and 2k+1 to the processes),
  and Trainer normalises each process's loss by the token count of the whole step; what remains is the float
  summation order: the gradient all-reduce adds two partial sums where one process adds all terms at once, and
  the matrix products run on differently padded shapes. Not compared: the key biases of attention. Softmax is
  invariant to adding one score to every key, so their gradient is zero in exact arithmetic and rounding noise
  (~1e-10) in practice; AdamW divides by sqrt(v) ~ |noise| and moves them by up to ~lr per step in a direction
  the noise decides, differently in every run, without changing any output (the logits are compared instead).
- logged losses: relative 1e-5.
- generation-based evaluation (BLEU, chrF, loss) of one folder by 2 processes and by 1: equal to 1e-9. With a
  per-device evaluation batch of 1 no example is padded, so the generated ids cannot depend on how the examples
  are dealt out; the 23 examples do not split evenly, so Accelerate's padding of the last step (dropped again by
  ``gather_for_metrics``) is exercised.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from cpu_fsdp import fsdp_units
from distributed_worker import DDP_VARIANTS, TOKEN_BATCHING, WORKER_MODELS, evaluate_folder, train_steps
from encdec import processes as processes_module
from encdec.data import load_data, pair_lengths, token_batches
from encdec.folders import check_model_folder
from encdec.processes import Shard, cpu_processes, is_main_process, launched, rank_and_world
from encdec.stop_points import STOP_ENV
from encdec.tokenization import load_tokenizer
from encdec.training import CHECKPOINT_SUBDIR, TOKENIZER_SUBDIR, load_run_config, tokenize_splits, train
from tiny_model_folders import DEMO_CONFIGS, REPO_ROOT, write_tiny_run_config
from toy import TINY_MODELS, collate, toy_examples, toy_model

ACCELERATE_CONFIGS = REPO_ROOT / "configs" / "accelerate"
WORKER = Path(__file__).with_name("distributed_worker.py")
PARAM_ATOL = 1e-5
LOSS_RTOL = 1e-5
STEPS, BATCH = 4, 8  # optimiser steps of the first run; per-process batch (the one-process reference takes 2 x 8)
TINY = {"transformer": TINY_MODELS["transformer"], "rnn": WORKER_MODELS["rnn"]}  # the run configs' models
DEMOS = DEMO_CONFIGS


def run_config(root: Path, family: str, output_dir: Path, **training) -> Path:
    """The family's demo run config with a tiny model (dropout off), 400/23 built-in pairs, 4 steps of 8 pairs per
    process, evaluation batches of 1 and greedy decoding."""
    return write_tiny_run_config(root / f"{family}-run.yaml", family, TINY[family], {
        "data": {"builtin_train": 400, "builtin_validation": 23, "builtin_test": 0},
        "tokenizer": {"vocab_size": 120, "min_frequency": 1},
        "training": {"output_dir": str(output_dir), "max_steps": STEPS, "per_device_train_batch_size": BATCH,
                     "per_device_eval_batch_size": 1, "eval_strategy": "steps", "eval_steps": STEPS,
                     "logging_steps": 1, "learning_rate": 3e-3, "lr_scheduler_type": "linear", "warmup_steps": 2,
                     "save_total_limit": 2, "report_to": "none", **training},
    })


def launch_command(args: list[str], accelerate: bool = False) -> tuple[list[str], dict[str, str]]:
    """The command and environment of ``launch``; the launcher chooses the rendezvous port, the test never does.
    torchrun's ``--standalone`` binds its rendezvous store to port 0 itself and hands the workers that store.
    accelerate's launcher has no such flag: with ``--main_process_port 0`` it asks the system for a free port (never
    the config's 29500, which other jobs on the machine may hold), and should another process hold that port when it
    checks, it falls back to the same standalone rendezvous."""
    if accelerate:
        launcher = ["accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIGS / "cpu-2proc.yaml"),
                    "--main_process_port", "0"]
    else:
        launcher = ["torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "CUDA_VISIBLE_DEVICES": ""}
    program = args if args[0].endswith(".py") else ["-m", *args]
    return [sys.executable, "-m", *launcher, "--tee", "3", *program], env


def launch(args: list[str], accelerate: bool = False, timeout: int = 300) -> subprocess.CompletedProcess:
    """Two CPU processes running ``python -m args...`` (``python args...`` when ``args[0]`` is a script): through
    ``accelerate launch`` with the repository's cpu-2proc.yaml, or through torchrun. Outputs are prefixed with the
    rank (``[default0]:``)."""
    command, env = launch_command(args, accelerate)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
    return result


# --- stopping a run at a known point, then kill -9 (encdec.stop_points) ----------------------------------------------
#
# A kill -9 test must kill a job between two of its writes, and which two must not depend on the machine's speed:
# with ENCDEC_STOP_AT=NAME:N the job stops itself (SIGSTOP) right after its N-th chunk or checkpoint is on disk, the
# test waits for that state (with a deadline: a job that never gets there fails the test instead of hanging it), and
# kills it there. The output of every process goes to a log file, never to a pipe that nobody reads while waiting.

STOP_DEADLINE = 300.0  # seconds a job may take to reach its stopping point


def process_table() -> dict[int, tuple[str, int]]:
    """Every process's state letter and parent pid, from /proc/PID/stat (its name may hold spaces and brackets)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):  # it ended meanwhile
                continue
            table[int(entry.name)] = (fields[0], int(fields[1]))
    return table


def threads_left(pid: int) -> bool:
    """Whether ``pid``, a zombie in /proc/PID/stat, still has threads ending: a process's main thread shows as a
    zombie as soon as it has ended, but the process keeps its files open (and their locks held) until its last thread
    has ended too, and only then does /proc/PID/task list the main thread alone."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:  # reaped meanwhile
        return False


def descendants(pid: int, table: dict[int, tuple[str, int]]) -> set[int]:
    """The processes below ``pid``: the launcher's workers (and anything they started)."""
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, (_, parent) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.is_file() else "(no log)"


def kill_group(pid: int) -> None:
    """SIGKILL ``pid`` and its process group (one this test started: a launcher, or a worker, which torchrun puts in
    a session of its own), once each; one already gone is fine."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def run_until_stopped(command: list[str], env: dict[str, str], stop_at: str, log: Path) -> None:
    """Run ``command`` (one process) with ``ENCDEC_STOP_AT=stop_at``; once it has stopped itself there, kill -9 it.
    The wait is ``waitpid(WUNTRACED)`` polled with ``WNOHANG`` until a deadline."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env={**env, STOP_ENV: stop_at}, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STOP_DEADLINE
        while True:
            pid, status = os.waitpid(process.pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                break
            if pid:  # it ended without reaching the point
                process.returncode = os.waitstatus_to_exitcode(status)
                pytest.fail(f"{' '.join(command)} ended ({process.returncode}) before {stop_at}:\n{log_tail(log)}")
            assert time.monotonic() < deadline, f"{stop_at} not reached before the deadline:\n{log_tail(log)}"
            time.sleep(0.05)
    finally:
        kill_group(process.pid)
        process.wait(timeout=60)


def launch_until_stopped(args: list[str], stop_at: str, log: Path, accelerate: bool = True,
                         kill_workers: bool = True) -> None:
    """``launch`` with ``ENCDEC_STOP_AT=stop_at``: once a worker has stopped itself there (state ``T`` in
    /proc/PID/stat; only the main process writes chunks, so it is the one that stops), kill -9 the launcher and
    every worker (each in its own session), and wait until none is left. With ``kill_workers=False`` only the
    launcher is killed: the workers must end by themselves (encdec_cli.die_with_launcher)."""
    command, env = launch_command(args, accelerate)
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env={**env, STOP_ENV: stop_at}, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + STOP_DEADLINE
        while True:
            assert process.poll() is None, f"the launch ended before {stop_at}:\n{log_tail(log)}"
            table = process_table()
            workers |= descendants(process.pid, table)
            if any(table.get(pid, ("",))[0] == "T" for pid in workers):
                break
            assert time.monotonic() < deadline, f"{stop_at} not reached before the deadline:\n{log_tail(log)}"
            time.sleep(0.05)
    finally:
        workers |= descendants(process.pid, process_table())
        kill_group(process.pid)  # first the launcher, which could otherwise start workers again
        process.wait(timeout=60)
        if kill_workers:
            for pid in workers:
                kill_group(pid)
        deadline = time.monotonic() + 60

        def alive() -> set[int]:
            return {pid for pid, (state, _) in process_table().items()
                    if pid in workers and (state != "Z" or threads_left(pid))}

        while (left := alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:  # never left behind, also when the test fails
            kill_group(pid)
        killed = "them" if kill_workers else "their launcher"
        assert not left, f"workers {sorted(left)} outlived kill -9 of {killed}"


def rank_output(result: subprocess.CompletedProcess, rank: int) -> list[str]:
    prefix = f"[default{rank}]:"
    return [line[len(prefix):] for line in (result.stdout + result.stderr).splitlines() if line.startswith(prefix)]


def without_key_biases(state: dict[str, torch.Tensor], d_model: int) -> dict[str, torch.Tensor]:
    """The state dict with the attention key biases zeroed (see the module docstring)."""
    out = {}
    for name, tensor in state.items():
        tensor = tensor.clone()
        if name.endswith("qkv_proj.bias"):  # [b_Q; b_K; b_V]
            tensor[d_model: 2 * d_model] = 0
        elif name.endswith("kv_proj.bias"):  # [b_K; b_V]
            tensor[:d_model] = 0
        out[name] = tensor
    return out


def unit_names(model) -> set[str]:
    unit_ids = {id(unit) for unit in fsdp_units(model)}
    return {name for name, module in model.named_modules() if id(module) in unit_ids}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[name].float() - b[name].float()).abs().max().item() for name in a)


def logged_losses(folder: Path, checkpoint: int) -> dict[int, float]:
    """The training loss of every logged step, from ``checkpoint-<checkpoint>``'s history."""
    state = json.loads((folder / CHECKPOINT_SUBDIR / f"checkpoint-{checkpoint}" / "trainer_state.json").read_text())
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> SimpleNamespace:
    """The two launches (see the module docstring); returns their folders and outputs."""
    root = tmp_path_factory.mktemp("distributed")
    out = SimpleNamespace(root=root, transformer=root / "transformer", rnn=root / "rnn", resumed=root / "resumed-2p",
                          resumed_1p=root / "resumed-1p", fsdp=root / "fsdp", ddp_check=root / "ddp-check",
                          evaluated=root / "evaluated-2p.json", token_batches=root / "token-batches")
    out.transformer_config = run_config(root, "transformer", out.transformer)
    out.rnn_config = run_config(root, "rnn", out.rnn, eval_strategy="no")
    out.transformer.mkdir()
    (out.transformer / "stale.txt").write_text("from an earlier run")  # --training.overwrite true removes it

    out.first = launch(["encdec", "train", str(out.transformer_config), "--training.overwrite", "true"],
                       accelerate=True)
    for copy in (out.resumed, out.resumed_1p):  # the same checkpoint, resumed by 2 processes and by 1
        shutil.copytree(out.transformer, copy)
    resume = ["--training.resume_from_checkpoint", "true", "--training.max_steps", str(STEPS + 1),
              "--training.eval_steps", "1"]  # a checkpoint (with the logged loss) at step 5
    jobs = [
        ["cli", "train", str(out.transformer_config), "--training.output_dir", str(out.resumed), *resume],
        ["cli", "train", str(out.rnn_config)],
        ["evaluate", "--model", str(out.transformer), "--config", str(out.transformer_config),
         "--output", str(out.evaluated)],
        ["ddp-check", "--output", str(out.ddp_check)],
        ["token-batches", "--config", str(out.transformer_config), "--tokenizer", str(out.transformer / "tokenizer"),
         "--output", str(out.token_batches)],
        ["fsdp", "--family", "transformer", "--output", str(out.fsdp / "transformer")],
        ["fsdp", "--family", "rnn", "--output", str(out.fsdp / "rnn")],
        ["fsdp", "--family", "transformer", "--api", "fsdp1", "--output", str(out.fsdp / "fsdp1-transformer")],
        ["fsdp", "--family", "rnn", "--api", "fsdp1", "--output", str(out.fsdp / "fsdp1-rnn")],
    ]
    (root / "jobs.json").write_text(json.dumps(jobs))
    out.second = launch([str(WORKER), "batch", str(root / "jobs.json")])
    out.resume = resume
    return out


# --- configs and units (no processes) --------------------------------------------------------------------------------

def test_accelerate_configs_load_and_comment_every_key() -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    expected = {"cpu-2proc": ("MULTI_GPU", 2, "no"), "single-gpu": ("NO", 1, "bf16"),
                "multi-gpu-ddp": ("MULTI_GPU", 8, "bf16"), "multi-gpu-fsdp": ("FSDP", 8, "bf16")}
    assert {p.stem for p in ACCELERATE_CONFIGS.glob("*.yaml")} == set(expected)
    for name, (kind, processes, precision) in expected.items():
        path = ACCELERATE_CONFIGS / f"{name}.yaml"
        config = load_config_from_file(str(path))
        assert (str(config.distributed_type).split(".")[-1], config.num_processes, config.mixed_precision) == (
            kind, processes, precision)
        keys = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
        assert all("#" in line for line in keys), [line for line in keys if "#" not in line]
    fsdp = load_config_from_file(str(ACCELERATE_CONFIGS / "multi-gpu-fsdp.yaml")).fsdp_config
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert "fsdp_transformer_layer_cls_to_wrap" not in fsdp  # the model's _no_split_modules decide
    assert fsdp["fsdp_reshard_after_forward"] == "FULL_SHARD" and fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_cpu_processes_only_under_a_launcher_without_gpu(monkeypatch) -> None:
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not cpu_processes()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cpu_processes() == (not torch.cuda.is_available())
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    assert cpu_processes()


@pytest.mark.parametrize("rank", [0, 1])
def test_the_main_process_is_the_only_one_or_rank_0_of_a_launch(monkeypatch, rank: int) -> None:
    """Without a launcher no process group is joined to answer; under one, Accelerate's state (rank 0) answers."""
    def joined() -> SimpleNamespace:
        return SimpleNamespace(is_main_process=rank == 0)

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(processes_module, "process_state", lambda: pytest.fail("joined a process group"))
    assert is_main_process()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(processes_module, "process_state", joined)
    assert is_main_process() == (rank == 0)


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_and_world_come_from_the_same_answer(monkeypatch, rank: int) -> None:
    """``rank_and_world`` (what ``Shard`` shares chunks by, round-robin) is (0, 1) without a launcher, with no process
    group joined, and Accelerate's state's under one; ``launched`` reads the launcher's variables alone (what the
    command line says before a command starts)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(processes_module, "process_state", lambda: pytest.fail("joined a process group"))
    assert rank_and_world() == (0, 1) and launched() == (0, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setattr(processes_module, "process_state",
                        lambda: SimpleNamespace(process_index=rank, num_processes=2, is_main_process=rank == 0,
                                                device="cpu"))
    assert rank_and_world() == launched() == (rank, 2)
    shard = Shard()  # the work shared out by rank: process p takes item p of each round of 2
    assert (shard.rank, shard.world, shard.is_main) == (rank, 2, rank == 0)
    assert shard.mine(["a", "b"]) == "ab"[rank] and shard.mine(["a"]) == ("a" if rank == 0 else None)
    assert launched({"RANK": "3", "WORLD_SIZE": "4"}) == (3, 4) and launched({}) == (0, 1)


@pytest.mark.parametrize("tied", [True, False])
def test_fsdp_units_follow_no_split_modules_and_never_share_a_parameter(tied: bool) -> None:
    transformer = toy_model({**TINY["transformer"], "encoder_layers": 2, "tie_word_embeddings": tied})
    assert set(transformer._no_split_modules) == {"TransformerSeq2SeqEncoderLayer", "TransformerSeq2SeqDecoderLayer"}
    units = unit_names(transformer)
    assert units == {"model.encoder.layers.0", "model.encoder.layers.1", "model.decoder.layers.0"}

    rnn = toy_model({**TINY["rnn"], "tie_word_embeddings": tied})
    assert set(rnn._no_split_modules) == {"LSTM", "GRU"}
    # the recurrent stacks; embeddings, bridge, attention and output layer stay in the root unit
    assert unit_names(rnn) == {"model.encoder.rnn", "model.decoder.step.rnn"}
    for model in (transformer, rnn):
        owners = [{id(p) for p in unit.parameters()} for unit in fsdp_units(model)]
        assert all(not (a & b) for i, a in enumerate(owners) for b in owners[i + 1:])


# --- DDP through encdec train ------------------------------------------------------------------------------------

def test_two_processes_train_like_one_process_with_twice_the_batch(runs, tmp_path) -> None:
    reference = tmp_path / "one-process"
    train(load_run_config(runs.transformer_config, [
        "--training.output_dir", str(reference), "--training.per_device_train_batch_size", str(2 * BATCH),
        "--tokenizer.path", str(runs.transformer / TOKENIZER_SUBDIR)]))
    two, one = load_file(runs.transformer / "model.safetensors"), load_file(reference / "model.safetensors")
    d_model = TINY["transformer"]["d_model"]
    assert max_difference(without_key_biases(two, d_model), without_key_biases(one, d_model)) <= PARAM_ATOL
    two_losses, one_losses = logged_losses(runs.transformer, STEPS), logged_losses(reference, STEPS)
    assert sorted(two_losses) == list(range(1, STEPS + 1))
    assert two_losses == pytest.approx(one_losses, rel=LOSS_RTOL)

    models = [AutoModelForSeq2SeqLM.from_pretrained(folder).eval() for folder in (runs.transformer, reference)]
    batch = collate(toy_examples(4, seed=3))  # any ids below the vocabulary size
    with torch.no_grad():
        logits = [model(**batch).logits for model in models]
    torch.testing.assert_close(logits[0], logits[1], atol=1e-4, rtol=0)


def test_the_distributed_run_writes_one_complete_folder_and_logs_once(runs) -> None:
    folder = runs.transformer
    assert not (folder / "stale.txt").exists()  # overwrite: the main process cleared the folder
    check_model_folder(folder)
    assert (folder / TOKENIZER_SUBDIR / "tokenizer.json").is_file()
    checkpoint = folder / CHECKPOINT_SUBDIR / f"checkpoint-{STEPS}"
    assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"} <= {p.name for p in checkpoint.iterdir()}
    results = json.loads((folder / "eval_results.json").read_text())
    assert results["train"]["global_step"] == STEPS
    assert results["train"]["epoch"] == pytest.approx(STEPS * 2 * BATCH / 400)  # 2 x 8 pairs per step
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    assert model.config.model_type == "transformer_seq2seq"

    main, other = rank_output(runs.first, 0), rank_output(runs.first, 1)
    def is_bar(line: str) -> bool:
        return "step/s" in line or "s/step" in line

    assert any(line.startswith("step ") and ": loss " in line for line in main) and any(map(is_bar, main))
    # rank 1: no progress bars, no training logs, no transformers warnings (the CLI's closing summary aside)
    noise = [line for line in other if is_bar(line) or ": loss " in line or "examples/s" in line
             or "[transformers]" in line]
    assert noise == []
    for result in (runs.first, runs.second):
        assert "unused parameters" not in result.stderr


def test_generation_evaluation_under_ddp_matches_one_process(runs) -> None:
    one = evaluate_folder(runs.transformer, load_run_config(runs.transformer_config))
    during_training = json.loads((runs.transformer / "eval_results.json").read_text())["validation"]
    after = json.loads(runs.evaluated.read_text())
    assert after["num_processes"] == 2
    assert one["chrf"] > 0  # the predictions are not empty
    for two in (during_training, after):
        for metric in ("bleu", "chrf", "gen_len"):
            assert two[metric] == one[metric], metric
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-6)


def test_a_distributed_checkpoint_resumes_with_two_processes_and_with_one(runs) -> None:
    train(load_run_config(runs.transformer_config, [
        "--training.output_dir", str(runs.resumed_1p), "--training.per_device_train_batch_size", str(2 * BATCH),
        *runs.resume]))
    step = STEPS + 1
    two, one = logged_losses(runs.resumed, step), logged_losses(runs.resumed_1p, step)
    assert two[step] == pytest.approx(one[step], rel=LOSS_RTOL)
    assert two[step] != two[STEPS]  # a new batch, not the last one again
    for folder in (runs.resumed, runs.resumed_1p):
        assert json.loads((folder / "eval_results.json").read_text())["train"]["global_step"] == step
        check_model_folder(folder)


def test_rnn_two_processes_train_like_one_process(runs, tmp_path) -> None:
    reference = tmp_path / "one-process"
    train(load_run_config(runs.rnn_config, [
        "--training.output_dir", str(reference), "--training.per_device_train_batch_size", str(2 * BATCH),
        "--tokenizer.path", str(runs.rnn / TOKENIZER_SUBDIR)]))
    check_model_folder(runs.rnn)
    two, one = load_file(runs.rnn / "model.safetensors"), load_file(reference / "model.safetensors")
    assert max_difference(two, one) <= PARAM_ATOL
    results = [json.loads((folder / "eval_results.json").read_text()) for folder in (runs.rnn, reference)]
    assert results[0]["train"]["train_loss"] == pytest.approx(results[1]["train"]["train_loss"], rel=LOSS_RTOL)
    assert results[0]["validation"]["bleu"] == results[1]["validation"]["bleu"]


def test_two_processes_batched_by_tokens_share_the_epoch_between_them(runs) -> None:
    """``training.max_tokens`` under accelerate: each process's dataloader (the Trainer's, prepared by accelerate)
    yields its own batches, within the budget; together they are one process's batches of that epoch, each pair
    once (plus at most one batch repeated so that both step alike), and epoch 1 is a new order."""
    shares = [json.loads((runs.token_batches / f"rank{rank}.json").read_text()) for rank in range(2)]
    config = load_run_config(runs.transformer_config, TOKEN_BATCHING)
    tokenized, _ = tokenize_splits(load_data(config.data), load_tokenizer(runs.transformer / "tokenizer"),
                                   config.training, config.data)
    lengths = np.maximum(*pair_lengths(tokenized["train"]))
    for epoch in range(2):
        batches = [b.tolist() for b in token_batches(lengths, 64, seed=7, epoch=epoch)]
        mine, theirs = shares[0][epoch], shares[1][epoch]
        assert len(mine) == len(theirs) == -(-len(batches) // 2)
        assert all(max(lengths[i] for i in batch) * len(batch) <= 64 for batch in mine + theirs)
        padding = batches[:len(mine) * 2 - len(batches)]
        assert sorted(map(sorted, mine + theirs)) == sorted(map(sorted, batches + padding))
    assert shares[0][0] != shares[0][1]


def test_every_variant_trains_under_ddp_without_unused_parameters(runs) -> None:
    for rank in (0, 1):
        report = json.loads((runs.ddp_check / f"rank{rank}.json").read_text())
        assert report["num_processes"] == 2 and set(report["variants"]) == set(DDP_VARIANTS)
        for name, variant in report["variants"].items():
            assert variant["ddp"] == "DistributedDataParallel", name
            assert variant["find_unused_parameters"] is False, name
            assert variant["without_gradient"] == [], name
            assert variant["global_step"] == 3, name
            assert not [w for w in variant["warnings"] if "unused" in w.lower()], name


# --- FSDP -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_fsdp_training_saves_a_folder_that_matches_one_process(runs, family: str) -> None:
    folder = runs.fsdp / family
    run = json.loads((folder / "fsdp_run.json").read_text())
    assert run["num_processes"] == 2
    expected_units = {"transformer": ["model.encoder.layers.0", "model.encoder.layers.1", "model.decoder.layers.0",
                                      "model.decoder.layers.1"],
                      "rnn": ["model.encoder.rnn", "model.decoder.step.rnn"]}
    assert run["units"] == expected_units[family]
    sharded = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()  # an ordinary folder, one process

    reference = toy_model(WORKER_MODELS[family])  # the worker's defaults: seed 0, 4 steps of 16 examples, lr 3e-3
    losses = train_steps(reference, toy_examples(4 * 16), steps=4, batch_size=16, lr=3e-3)
    assert run["losses"] == pytest.approx(losses, rel=LOSS_RTOL)
    state, reference_state = sharded.state_dict(), reference.state_dict()
    if family == "transformer":
        d_model = reference.config.d_model
        state, reference_state = without_key_biases(state, d_model), without_key_biases(reference_state, d_model)
    assert max_difference(state, reference_state) <= PARAM_ATOL
    batch = collate(toy_examples(4, seed=3))
    with torch.no_grad():
        torch.testing.assert_close(sharded(**batch).logits, reference.eval()(**batch).logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_fsdp1_auto_wrap_from_no_split_modules_trains_like_one_process(runs, family: str) -> None:
    """What Accelerate's FSDP plugin (configs/accelerate/multi-gpu-fsdp.yaml) does, run on CPU: FSDP1 wraps the
    classes named in ``_no_split_modules``; with tied embeddings no two units may share a weight."""
    run = json.loads((runs.fsdp / f"fsdp1-{family}" / "fsdp_run.json").read_text())
    assert run["num_processes"] == 2
    reference = toy_model(WORKER_MODELS[family])  # tied embeddings (the worker's WORKER_MODELS)
    assert reference.config.tie_word_embeddings
    losses = train_steps(reference, toy_examples(4 * 16), steps=4, batch_size=16, lr=3e-3)
    assert run["losses"] == pytest.approx(losses, rel=LOSS_RTOL)
