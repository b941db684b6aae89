"""How the local engine runs a model: one frozen set of options, kept free of torch so that settings can build and
check it at start-up, and handed whole to the engine and the serving layer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model.errors import OptionError

DEVICES = ("cpu", "cuda")
DTYPES = ("bfloat16", "float32")
QUANTIZATIONS = ("int8", "int4")
# auto: drafts from the context unless the decode steps are captured (CUDA graphs on a GPU) or compiled
# (--compile on a CPU): captured verify passes decoded replayed episodes at 0.62-1.13x the replayed steps on an
# H200, and no verify pass is compiled.
SPECULATION = ("auto", "ngram", "mtp", "off")
MAX_DRAFT_TOKENS = 8  # the longest draft a verify pass may check
# The instruction sets the CPU kernels can be capped at (kernels/cpu/isa.py), highest first; native: this CPU's best.
CPU_ISAS = ("native", "amx", "avx512-bf16", "avx512", "avx2", "generic")
CPU_ISA_HELP = (
    "the instruction set a local model's CPU kernels (and torch's own) are built for and use: native (default, "
    "this CPU's best) or a lower level this CPU runs, to run and measure that level's path"
)


@dataclass(frozen=True)
class EngineOptions:
    """The engine's options; None leaves the choice to the machine (see the fields' comments)."""

    device: str | None = None  # cpu or cuda; None: cuda when available
    dtype: str | None = None  # of the activations; None: cpu.default_dtype of the device
    quantize: str | None = None  # int8 or int4 (with some 6-bit) weights (CPU only); None: as stored
    threads: int | None = None  # CPU threads; None: one per physical core unless OMP_NUM_THREADS decides
    cpu_isa: str | None = (
        None  # the CPU kernels' instruction set, capped (CPU_ISAS); None: SQLSCOUT_CPU_ISA or native
    )
    compile: bool = False  # the CPU decode step through torch.compile
    max_context: int = 32768  # tokens a session holds at most
    prefill_chunk: int = 2048  # tokens run through the model at once while prefilling
    cuda_graph: bool = True  # capture decode steps as CUDA graphs on a GPU
    max_batch_rows: int = 8  # rows (of all callers) that the batch scheduler decodes together
    cache_dir: Path | None = None  # keeps quantized weights and compiled steps for the next run
    speculate: str = (
        "auto"  # ngram: drafts from the context; mtp: from the MTP head; off; auto: ngram unless captured
    )
    # The longest draft a verify pass checks, 1 to MAX_DRAFT_TOKENS: 6 decoded replayed agent episodes fastest on a
    # Xeon with AMX (1.78x against 1.72x at 4 and 1.75x at 8); the draft budget cuts drafts where passes cost more.
    speculate_tokens: int = 6
    draft_head: Path | None = (
        None  # a checkpoint whose mtp.* tensors the mtp drafter uses (default: the model's)
    )

    def __post_init__(self) -> None:
        choices_of = (
            ("device", DEVICES),
            ("dtype", DTYPES),
            ("quantize", QUANTIZATIONS),
            ("speculate", SPECULATION),
            ("cpu_isa", CPU_ISAS),
        )
        for name, choices in choices_of:
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise OptionError(name, f"must be one of {', '.join(choices)}, not {value!r}")
        if self.threads is not None and self.threads < 1:
            raise OptionError("threads", f"must be at least 1, not {self.threads}")
        for name in ("max_context", "prefill_chunk", "max_batch_rows"):
            if getattr(self, name) < 1:
                raise OptionError(name, f"must be at least 1, not {getattr(self, name)}")
        if not 1 <= self.speculate_tokens <= MAX_DRAFT_TOKENS:
            raise OptionError(
                "speculate_tokens", f"must be between 1 and {MAX_DRAFT_TOKENS}, not {self.speculate_tokens}"
            )
        if self.draft_head is not None and self.speculate != "mtp":
            raise OptionError("draft_head", "is the head of --speculate mtp: add it or drop --draft-head")
        if self.device is not None:
            self.check_device(self.device)

    def speculation(self, captured: bool) -> str:
        """ngram, mtp or off, as `speculate` decides for an engine that captures its decode steps or not: auto is
        ngram unless the steps are captured or compiled."""
        if self.speculate == "auto":
            return "off" if captured or self.compile else "ngram"
        return self.speculate

    def check_device(self, device_type: str) -> None:
        """Refuse the options that only a CPU runs when the engine runs on `device_type`."""
        if device_type == "cpu":
            return
        if self.quantize is not None:
            raise OptionError("quantize", "runs a model on the CPU only: drop it or use the cpu device")
        if self.compile:
            raise OptionError(
                "compile", "compiles the CPU decode step; on a GPU the step is a CUDA graph already: drop it"
            )
        if self.cpu_isa not in (None, "native"):
            raise OptionError("cpu_isa", "caps the CPU kernels, which a model on a GPU does not run: drop it")
