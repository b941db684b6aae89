"""The engine: a loaded model, its options and its decode workspaces; sessions (model/session.py) keep each
sequence's state across appends and generations."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import torch

from kernels import cpu as cpu_kernels
from model.append_steps import AppendSteps
from model.cache import ModelCache
from model.config import Qwen35Config
from model.cpu import chosen_dtype, on_a_thread_of_its_own, release_freed_heap, set_cpu_threads
from model.cuda_graph import CudaGraphCapture, StepCapture
from model.decode_workspace import DecodeWorkspace
from model.draft_budget import DraftBudget
from model.draft_head import DraftHead
from model.drafting import NgramDrafter
from model.engine_options import MAX_DRAFT_TOKENS, EngineOptions
from model.errors import OptionError
from model.loader import load_draft_head, load_weights
from model.model_dir import check_model_dir
from model.qwen35 import Qwen35Model
from model.sampling import SamplingParams
from model.session import Session
from model.tokenizer import Tokenizer
from model.verify_steps import VerifySteps

log = logging.getLogger(__name__)

# Under an engine's cache directory: quantized weights, and torch.compile's compiled graphs.
QUANTIZED_CACHE = "quantized-weights"
COMPILE_CACHE = "torch-compile"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Engine:
    """A Qwen3.5 model and its tokenizer, ready to open sessions."""

    def __init__(
        self,
        model: Qwen35Model,
        tokenizer: Tokenizer,
        options: EngineOptions = EngineOptions(),
        *,
        capture: StepCapture | None = None,
    ) -> None:
        """options: those the model was loaded with, and how sessions run (max_context, prefill_chunk, cuda_graph,
        compile: the decode steps that are not captured run through torch.compile, each sampling mode compiled
        once per process on first use); capture: a StepCapture to use on any device instead of CUDA graphs."""
        self.model = model
        self.tokenizer = tokenizer
        self.options = options
        self.config: Qwen35Config = model.config
        self.device = model.device
        self.dtype = model.dtype
        self.max_context = options.max_context
        self.prefill_chunk = options.prefill_chunk
        if capture is None and options.cuda_graph and self.device.type == "cuda":
            capture = CudaGraphCapture()
        self.capture = capture
        self._workspaces: dict[int, DecodeWorkspace] = {}
        self._verify_steps: dict[int, VerifySteps] = {}
        self._append_steps: dict[int, AppendSteps] = {}
        # Sessions on several threads may ask for a batch size's workspace at once: one of each must be made.
        self._making = threading.RLock()
        # False once an append's capture failed: appends then run eagerly, decode steps are still replayed.
        self.replays_appends = True
        # On a GPU the host checks for finished rows only every few tokens so the device never waits.
        self.sync_every = 8 if self.device.type == "cuda" else 1
        speculation = options.speculation(captured=capture is not None)
        self.drafter = NgramDrafter() if speculation == "ngram" else None
        self.draft_head = DraftHead(model) if speculation == "mtp" else None
        self.speculate_tokens = options.speculate_tokens
        # None checks every draft whole (tests with scripted drafts).
        self.draft_budget: DraftBudget | None = (
            DraftBudget(options.speculate_tokens) if self.speculates else None
        )

    @property
    def speculates(self) -> bool:
        """Whether generate() verifies drafts (from the context or the draft head)."""
        return self.drafter is not None or self.draft_head is not None

    @property
    def cuda_graph(self) -> bool:
        """Whether decode steps are captured and replayed (False once a capture has failed)."""
        return self.capture is not None

    @classmethod
    def load(cls, model_dir: str | Path, options: EngineOptions = EngineOptions()) -> Engine:
        """Load config, tokenizer and weights of model_dir as options say: on cuda when available, else the CPU;
        activations in cpu.default_dtype(device) unless options.dtype is given; quantized weights on a CPU only
        (see load_weights); options.cache_dir keeps quantized weights and compiled steps for the next run."""
        path = check_model_dir(model_dir)
        device = torch.device(options.device) if options.device is not None else default_device()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but torch sees no CUDA device here: use device cpu")
        options.check_device(device.type)
        if device.type == "cpu":
            set_cpu_threads(options.threads)
            if options.cpu_isa is not None:
                try:
                    cpu_kernels.set_isa(options.cpu_isa)
                except ValueError as error:
                    raise OptionError("cpu_isa", str(error)) from None
            cpu_kernels.ops()  # built (once per machine) before the first token, not during it
        dtype = getattr(torch, options.dtype) if options.dtype is not None else chosen_dtype(device)
        config = Qwen35Config.from_model_dir(path)
        cache_dir = options.cache_dir
        if options.compile and cache_dir is not None:
            # Inductor keeps its compiled graphs there, so a later run skips most of the compile.
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / COMPILE_CACHE))

        def weights_of_the_model() -> dict:
            weights = load_weights(
                path, config, device, dtype, options.quantize, cache_dir and cache_dir / QUANTIZED_CACHE
            )
            if options.speculate == "mtp":
                weights.update(
                    load_draft_head(options.draft_head or path, config, device, dtype, options.quantize)
                )
            return weights

        # Quantizing and copying the weights runs parallel regions: on the calling thread (the main one, in the
        # server) they would leave an OpenMP team that slows the scheduler thread's decoding.
        if device.type == "cpu":
            weights = on_a_thread_of_its_own(weights_of_the_model)
            release_freed_heap()
        else:
            weights = weights_of_the_model()
        tokenizer = Tokenizer.from_model_dir(path)
        return cls(Qwen35Model(config, weights), tokenizer, options)

    def warm_up(self, sampling: SamplingParams) -> None:
        """Run one decode step in sampling's mode on a scratch row, so that compiling the step (options.compile)
        happens now rather than in the first request; on a CPU on a thread of its own, as the load's work."""

        def step() -> None:
            session = self.new_session(1, max_tokens=4)
            session.append([0])
            session.generate(2, sampling, stop_ids=set())  # n tokens run n - 1 decode steps

        if self.device.type == "cpu":
            on_a_thread_of_its_own(step)
        else:
            step()

    def new_session(self, batch_size: int = 1, max_tokens: int | None = None) -> Session:
        """A session of batch_size empty rows, each holding up to max_tokens (default max_context) tokens."""
        return Session(self, batch_size, max_tokens or self.max_context)

    def workspace(self, batch_size: int) -> DecodeWorkspace:
        """The capturing workspace that every session of batch_size shares (see DecodeWorkspace), made on first use."""
        if self.capture is None:
            raise RuntimeError("this engine captures no decode steps: sessions decode in their own caches")
        with self._making:
            workspace = self._workspaces.get(batch_size)
            if workspace is None:
                # The spare position, and when the engine speculates the scratch positions of a verify pass.
                spare = 1 + (MAX_DRAFT_TOKENS if self.speculates else 0)
                cache = ModelCache.allocate(
                    self.config, batch_size, self.max_context + spare, self.device, self.dtype
                )
                workspace = self._workspaces[batch_size] = DecodeWorkspace(self.model, cache, self.capture)
            return workspace

    def verify_workspace(self, batch_size: int) -> VerifySteps:
        """The captured verify passes over the workspace of batch_size (see VerifySteps), made on first use."""
        with self._making:
            steps = self._verify_steps.get(batch_size)
            if steps is None:
                cache = self.workspace(batch_size).cache
                steps = VerifySteps(
                    self.model, cache, self.capture, self.speculate_tokens + 1, self.max_context
                )
                self._verify_steps[batch_size] = steps
            return steps

    def append_steps(self, batch_size: int) -> AppendSteps:
        """The captured prefills of short appends over the workspace of batch_size (see AppendSteps), made on
        first use."""
        with self._making:
            steps = self._append_steps.get(batch_size)
            if steps is None:
                cache = self.workspace(batch_size).cache
                steps = self._append_steps[batch_size] = AppendSteps(self.model, cache, self.capture)
            return steps

    def stop_capturing_appends(self, reason: Exception) -> None:
        """Prefill appends eagerly for good; the decode steps stay captured."""
        log.warning(
            "an append could not be captured as a CUDA graph, appending eagerly from now on: %s", reason
        )
        self.replays_appends = False
        self._append_steps.clear()

    def stop_capturing(self, reason: Exception) -> None:
        """Fall back to eager decoding (and appends) for good: sessions run in their own caches from now on."""
        log.warning(
            "a decode step could not be captured as a CUDA graph, decoding eagerly from now on: %s", reason
        )
        self.capture = None
        self._workspaces.clear()
        self._verify_steps.clear()
        self._append_steps.clear()
