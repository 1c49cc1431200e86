# Sourced by the peers' make_venv.sh scripts: EXTRA=(pip arguments) for PyTorch's CPU wheels.
# torch==2.13.0+cpu lives on the PyTorch CPU index; add that index only when it answers
# (where it does not, pip must find the +cpu wheel elsewhere, e.g. a local find-links folder).
EXTRA=()
if "$PY" -c 'import urllib.request as u; u.urlopen("https://download.pytorch.org/whl/cpu/", timeout=5)' 2>/dev/null; then
  EXTRA=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
