from setuptools import find_packages, setup

setup(
    name="pe_plugin",
    version="0.1.0",
    description="Positional encodings for fairseq NMT: no-PE, SAPE, LAPE, RPE, T5, Adaptive-T5, PosNet",
    packages=find_packages(include=["pe_plugin", "pe_plugin.*"]),
    # the same floor as scripts/setup_env.sh, README.md and pe_plugin.PYTHON_FLOOR (tests/test_python_floor.py)
    python_requires=">=3.11",
    # fairseq is installed by scripts/setup_env.sh (ve-fairseq 0.12.3 --no-deps); listing it here would pull
    # torchaudio and another torch.
    install_requires=["sacrebleu>=2.3", "sacremoses", "subword-nmt", "sentencepiece", "regex"],
    extras_require={"dev": ["pytest"], "plots": ["matplotlib"]},
)
