"""Record real llama.cpp server responses of the tiny random-weight test model into tests/data/responses/.

Build ``llama-server`` (CPU only) from the llama.cpp that the llama-cpp-python sdist vendors::

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d sdist
    tar xzf sdist/llama_cpp_python-0.3.36.tar.gz
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build-llama -DCMAKE_BUILD_TYPE=Release \\
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \\
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF
    cmake --build build-llama --target llama-server -j2

(``LLAMA_BUILD_UI=OFF`` with ``LLAMA_USE_PREBUILT_UI=OFF`` builds the server without its web UI, so nothing is
downloaded.) Then, with the project's Python (torch, transformers, numpy, safetensors)::

    python tests/engine/record_llamacpp.py --llama-server build-llama/bin/llama-server \\
        --llama-cpp llama_cpp_python-0.3.36/vendor/llama.cpp [--out tests/data/responses]

It builds the engine tests' tiny GPT-2 (``save_tiny_gpt2``: random weights, so the responses hold no third-party
model output), converts it to an F32 GGUF with the vendored ``convert_hf_to_gguf.py`` and ``gguf-py`` (the tiny
tokenizer's pre-tokenizer hash is unknown to the converter, so it is told "gpt-2": the GPT-2 split regex that the
tokenizer's ``ByteLevel`` pre-tokenizer uses; the vocabulary and its ids are the tokenizer's own), starts
``llama-server`` on a free port of 127.0.0.1 (with a bounded lifetime; attention in F32: ``--flash-attn off
--cache-type-k f32 --cache-type-v f32``, so that the numbers can be checked against F32 teacher forcing) and saves,
pretty-printed:

* ``llamacpp_completion_recorded.json``: ``/completion`` with ``n_probs: 5`` (raw probabilities, the default
  ``post_sampling_probs: false``);
* ``llamacpp_v1_chat_recorded.json``: ``/v1/chat/completions`` with ``logprobs: true, top_logprobs: 5`` (the
  tokenizer's chat template, rendered by the server's Jinja engine);
* ``llamacpp_v1_completions_recorded.json``: ``/v1/completions`` with ``logprobs: 5``.

The requests are saved in ``llamacpp_requests.json`` (file name -> endpoint and body); the server's build string
(``/props``) is printed. Before recording, it checks that the server tokenizes the prompt into the Hugging Face
tokenizer's ids (no BOS added). Greedy decoding (temperature 0): recording again gives the same tokens and numbers
(ids, times and timings differ). The server is always stopped, also when a request fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from recording import ROOT, record

import bench.server_throughput as bench

PROMPT = "Q: What is the capital of France? A:"
QUESTION = "What is the capital of France?"
SERVED_NAME = "tiny"
LIFETIME_S = 600  # the server is killed after this long whatever happens to this script
# Attention in F32 (no flash attention, an F32 KV cache): with the defaults (F16 cache, flash attention) the
# log-probs of this model differ from F32 teacher forcing by up to 4e-3, with these by 1e-3, all of it from ggml's
# CPU GELU (an F16 lookup table), which the tests reproduce.
F32_ATTENTION = ("--flash-attn", "off", "--cache-type-k", "f32", "--cache-type-v", "f32")
_GRACE = 10.0  # seconds the server gets to end after SIGTERM

# Run the vendored converter with the pre-tokenizer named: the tiny tokenizer's hash is not in its table.
_CONVERT = """
import runpy, sys
src = sys.argv[1]
sys.path[:0] = [src, src + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert_to_gguf(model_dir: Path, llama_cpp: Path, out: Path) -> Path:
    """An F32 GGUF of the Hugging Face folder `model_dir`, written with the vendored converter."""
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.setdefault("n_ctx", config["n_positions"])  # the GPT-2 converter reads n_ctx, which recent configs omit
    config_path.write_text(json.dumps(config, indent=2))
    command = [sys.executable, "-c", _CONVERT, str(llama_cpp), str(model_dir), "--outtype", "f32",
               "--outfile", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"convert_hf_to_gguf.py failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return out


def get_json(url: str, timeout: float = 10.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _healthy(url: str) -> bool:
    return get_json(url + "/health", timeout=2).get("status") == "ok"


def start_llama_server(binary: Path, gguf: Path, log_path: Path, *, timeout: float = 120.0,
                       ) -> tuple[subprocess.Popen, str]:
    """Start ``llama-server`` on `gguf` on a free port of 127.0.0.1 (its own process group, killed after
    LIFETIME_S by ``timeout`` where there is one); return it and its base URL once ``/health`` answers."""
    port = bench._free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--alias", SERVED_NAME,
               "-c", "256", "-np", "1", "-t", "1", "--jinja", "--no-webui", *F32_ATTENTION]
    if shutil.which("timeout"):
        command = ["timeout", "-s", "KILL", str(LIFETIME_S), *command]
    return bench.start_server(command, port, log_path, _healthy, name="llama-server", timeout=timeout, poll=0.5,
                              grace=_GRACE)


def stop_llama_server(proc: subprocess.Popen) -> None:
    bench.stop_process_group(proc, grace=_GRACE)


def requests_for() -> dict[str, tuple[str, dict]]:
    """File name -> (endpoint, request body)."""
    common = {"temperature": 0.0, "seed": 0}
    return {
        "llamacpp_completion_recorded.json": ("/completion", {
            **common, "prompt": PROMPT, "n_predict": 8, "n_probs": 5}),
        "llamacpp_v1_chat_recorded.json": ("/v1/chat/completions", {
            **common, "model": SERVED_NAME, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8,
            "logprobs": True, "top_logprobs": 5}),
        "llamacpp_v1_completions_recorded.json": ("/v1/completions", {
            **common, "model": SERVED_NAME, "prompt": PROMPT, "max_tokens": 8, "logprobs": 5}),
    }


def check_tokenization(url: str, model_dir: Path) -> None:
    """The server splits the prompt into the Hugging Face tokenizer's ids (no BOS added)."""
    from transformers import AutoTokenizer

    want = AutoTokenizer.from_pretrained(model_dir)(PROMPT, add_special_tokens=False)["input_ids"]
    got = json.loads(bench.post_json(url + "/tokenize", {"content": PROMPT, "add_special": True}))["tokens"]
    if got != want:
        raise SystemExit(f"llama-server tokenizes the prompt as {got}, the Hugging Face tokenizer as {want}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", type=Path, required=True, help="the llama-server binary")
    parser.add_argument("--llama-cpp", type=Path, required=True,
                        help="the llama.cpp source folder (convert_hf_to_gguf.py, gguf-py)")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "responses")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tiny-gpt2-llamacpp-") as tmp:
        model_dir = bench.save_tiny_gpt2(Path(tmp) / "model")
        gguf = convert_to_gguf(model_dir, args.llama_cpp, Path(tmp) / "tiny-f32.gguf")
        proc, url = start_llama_server(args.llama_server, gguf, Path(tmp) / "server.log")
        try:
            props = get_json(url + "/props")
            check_tokenization(url, model_dir)
            record(url, requests_for(), args.out, "llamacpp_requests.json")
            print(f"llama-server build: {props.get('build_info')}")
        finally:
            stop_llama_server(proc)


if __name__ == "__main__":
    main()
