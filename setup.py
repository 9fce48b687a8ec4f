from setuptools import find_packages, setup

# Two packages, one distribution: pe_plugin is the fairseq plugin (importing it imports fairseq and torch and
# registers the models: `fairseq-train --user-dir pe_plugin` imports it); pe_tools holds the command-line tools,
# and its data preparation and scoring never import torch, fairseq or pe_plugin (docs/design.md, Layout).
setup(
    name="pe_plugin",
    version="0.1.0",
    description="Positional encodings for fairseq NMT: no-PE, SAPE, LAPE, RPE, T5, Adaptive-T5, PosNet-Embed, PosNet-Attn, "
                "RoPE, ALiBi, KERPLE",
    packages=find_packages(include=["pe_plugin", "pe_plugin.*", "pe_tools", "pe_tools.*"]),
    # the recipe tables, found with importlib.resources (pe_tools.recipes)
    package_data={"pe_tools.recipes": ["*/methods.toml", "*/corpora.toml"]},
    # the same floor as scripts/setup_env.sh, README.md and pe_plugin.PYTHON_FLOOR (tests/test_python_floor.py)
    python_requires=">=3.11",
    # fairseq is installed by scripts/setup_env.sh (ve-fairseq 0.12.3 --no-deps); listing it here would pull
    # torchaudio and another torch.
    # sacrebleu below 2.7: pe_tools/scoring/ngram.py and significance.py read a metric's sufficient statistics
    # through its private _extract_corpus_statistics (the public API gives only scores), and significance.py's
    # paired bootstrap reproduces sacrebleu.significance's with its private helpers, written against 2.6 and tested
    # against it bit for bit (tests/test_evaluate.py); a new minor may change them
    install_requires=["sacrebleu>=2.3,<2.7", "sacremoses", "subword-nmt", "sentencepiece", "regex", "tqdm"],
    # triton: the tests run the Triton kernels on the CPU in its interpreter (PyTorch's CUDA wheels ship it already);
    # pytest-xdist: `make test` runs the suite in three processes (most of its time is Python starting tools)
    extras_require={"dev": ["pytest", "pytest-xdist", "triton"], "plots": ["matplotlib"]},
    entry_points={"console_scripts": [
        "pe-prepare = pe_tools.data.cli:main",
        "pe-train = pe_tools.recipes.launch:train_main",
        "pe-generate = pe_tools.recipes.launch:generate_main",
        "pe-record = pe_tools.recipes.launch:record_main",
        "pe-report = pe_tools.recipes.launch:report_main",
        "pe-queue = pe_tools.recipes.queue_cli:main",
        "pe-evaluate = pe_tools.scoring.cli:main",
        "pe-average = pe_tools.average:main",
        "pe-probe = pe_tools.probe:main",
        "pe-swap-probe = pe_tools.swap_probe:main",
        "pe-bench = pe_tools.bench.cli:main",
        "pe-demo = pe_tools.demo:main",
        "pe-length = pe_tools.length_experiment:main",
    ]},
)
