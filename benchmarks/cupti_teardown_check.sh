python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for r in 1 2; do
  echo "plain $(python3 examples/train_transformer.py --steps 40 | tail -1)"
  echo "bwdiag-new $(python3 -m bwdiag run --no-analyze --force -o /tmp/a examples/train_transformer.py --steps 40 2>/dev/null | tail -1)"
  echo "bwdiag-old $(TEARDOWN_CUPTI=0 python3 -m bwdiag run --no-analyze --force -o /tmp/b examples/train_transformer.py --steps 40 2>/dev/null | tail -1)"
done
