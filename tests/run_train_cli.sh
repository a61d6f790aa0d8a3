#!/usr/bin/env bash
# kiln train from the command line: usage errors, bad data files, the JSON log, the
# curve, the written model, a resumed run that continues exactly (shuffled batches and
# all), and --skip-nonfinite. usage: run_train_cli.sh KILN (from the repository root)
set -uo pipefail
kiln=$1
m=models/train/mlp
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect CODE TEXT -- COMMAND...: exit code CODE and TEXT in its output
expect() {
  local code=$1 text=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" = "$code" ] || fail "$* exited $rc, expected $code: $out"
  [ -z "$text" ] || grep -qF -- "$text" <<<"$out" || fail "$*: no '$text' in: $out"
}

expect 0 "usage: kiln train" -- "$kiln" train --help
expect 2 "--data" -- "$kiln" train $m/model.onnx --steps 3
expect 2 "one of --epochs or --steps" -- "$kiln" train $m/model.onnx --data $m/train.npz
expect 2 "unknown option --frobnicate" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --frobnicate
expect 2 "--batch 0: must be at least 1" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --batch 0
expect 2 "--steps -1: must be at least 1" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps -1
expect 1 "--lr -1: option 'lr': -1 is out of range: expected a learning rate, at least 0" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --lr -1
expect 1 "--lr abc: must be a number" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --lr abc
# issue 20, round 4: --lr inf ended with exit 1 and no message; --batch and --epochs
# near 2^63 overflowed the step count (UBSan)
expect 1 "step 1: learning rate inf: expected a finite value" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --lr inf
expect 1 "make more steps than kiln counts" -- "$kiln" train $m/model.onnx --data $m/train.npz --epochs 9223372036854775807 --batch 1
expect 0 "trained 1 steps" -- "$kiln" train $m/model.onnx --data $m/train.npz --epochs 1 --batch 9223372036854775807
expect 1 "--ignore-index x: must be an integer" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --ignore-index x
echo "not a zip" >"$tmp/bad.npz"
expect 1 "not a .npz archive" -- "$kiln" train $m/model.onnx --data "$tmp/bad.npz" --steps 1
expect 1 "expected shape float32[batch,64], got [32,1,8,8]" -- "$kiln" train $m/model.onnx --data models/train/cnn/eval.npz --steps 1
expect 1 "is not one" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --loss hinge
expect 1 "--schedule" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --schedule linear
expect 0 "trained 3 steps" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 3 --bf16 --optimizer adam
# a curve or log that cannot be written (a full disk: /dev/full) says so, not only exit 1
[ -c /dev/full ] && expect 1 "kiln train: cannot write /dev/full" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --curve /dev/full
[ -c /dev/full ] && expect 1 "kiln train: cannot write /dev/full" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --log /dev/full
# a FIFO that no program reads: refused at once (opening it waited for a reader forever)
mkfifo "$tmp/fifo"
for opt in --log --curve; do
  expect 1 "kiln train: $tmp/fifo is a FIFO that no program reads" -- timeout 10 "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 $opt "$tmp/fifo"
done
# a link to a file where the log goes: refused, its target left as it was (it was
# emptied and written over: /etc/passwd, as root); a link to a stream is followed
echo victim >"$tmp/victim"
ln -s "$tmp/victim" "$tmp/link"
for opt in --log --curve; do
  expect 1 "kiln train: $tmp/link is a symbolic link" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 $opt "$tmp/link"
done
[ "$(cat "$tmp/victim")" = victim ] || fail "a link's target was written: $(head -c 100 "$tmp/victim")"
out=$("$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --log /proc/self/fd/1 2>&1)
grep -q '"step": 1' <<<"$out" || fail "--log /proc/self/fd/1: $out"
# one with a reader (this shell, on descriptor 3) is written as any file
exec 3<>"$tmp/fifo"
expect 0 "trained 1 steps" -- timeout 10 "$kiln" train $m/model.onnx --data $m/train.npz --steps 1 --log "$tmp/fifo"
line=
read -r -t 5 -u 3 line
exec 3<&-
grep -q '"step": 1' <<<"$line" || fail "--log FIFO: the reader got: $line"
expect 0 "trained 3 steps" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 3 --bf16 --optimizer adamw --amsgrad
expect 0 "trained 3 steps" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 3 --bf16 --optimizer lars --lr 20
expect 0 "trained 3 steps" -- "$kiln" train $m/model.onnx --data $m/train.npz --steps 3 --bf16 --optimizer lamb

# --bf16 computes in bf16 at the amx level (KILN_ISA lowers it): the convolutions and
# their gradients name bf16 kernels in --profile; below it none does (the converting
# path: float32 arithmetic over the bf16 weights) unless --precision bf16 asks, which
# avx512_bf16 can do and lower levels refuse
level=$("$kiln" info | sed -n 's/^isa: \([a-z0-9_]*\).*/\1/p')
for prec in "" bf16; do
  out=$("$kiln" train models/train/cnn/model.onnx --data models/train/cnn/train.npz --steps 4 \
    --bf16 --profile ${prec:+--precision $prec} 2>&1)
  rc=$?
  want=no
  [ "$level" = amx ] && want=yes
  [ "$prec" = bf16 ] && [ "$level" = avx512_bf16 ] && want=yes
  if [ "$prec" = bf16 ] && [ "$want" = no ] && [ "$level" != amx ]; then
    [ $rc = 1 ] && grep -q "precision" <<<"$out" ||
      fail "--precision bf16 at $level: expected a refusal naming the precision: $out"
    continue
  fi
  [ $rc = 0 ] || fail "kiln train --bf16 --profile ${prec:+--precision $prec}: $out"
  for op in Conv kiln.ConvGradW kiln.ConvGradX; do
    line=$(grep -E "^  $op " <<<"$out")
    [ -n "$line" ] || fail "--bf16 --profile: no $op line in: $out"
    if [ $want = yes ]; then
      grep -q ' bf16' <<<"$line" || fail "--bf16 ${prec:+--precision $prec} at $level: $op not in bf16: $line"
    else
      grep -q ' bf16' <<<"$line" && fail "--bf16 at $level: $op claims bf16: $line"
    fi
  done
done

# the log, the curve, the model
expect 0 "trained 10 steps" -- "$kiln" train $m/model.onnx --data $m/train.npz --eval $m/eval.npz \
  --steps 10 --batch 32 --optimizer adam --lr 0.01 --schedule cosine --log "$tmp/log.jsonl" \
  --curve "$tmp/curve.svg" -o "$tmp/out.onnx"
[ "$(grep -c '"loss"' "$tmp/log.jsonl")" = 10 ] || fail "the log has $(grep -c '"loss"' "$tmp/log.jsonl") step lines, expected 10"
grep -q '"step": 1, "epoch": 1, "loss": [0-9.e+-]*, "lr": 0.01, "ms": ' "$tmp/log.jsonl" ||
  fail "the first log line is not as documented: $(head -1 "$tmp/log.jsonl")"
grep -q '"eval_accuracy"' "$tmp/log.jsonl" || fail "no eval line in the log"
grep -q '<polyline' "$tmp/curve.svg" || fail "the curve has no polyline"
expect 0 "logits" -- "$kiln" run "$tmp/out.onnx" --shape x=4x64

# a run of 14 steps, and the same in two parts through a checkpoint: the same losses
# (at one thread count: by default the count follows the CPUs other programs leave
# free, and sums split over threads round differently, so a busy machine gave the
# whole run 2 threads and the resumed one 1, and step 14 differed in its 7th digit)
"$kiln" train $m/model.onnx --data $m/train.npz --steps 14 --batch 128 --optimizer adamw \
  --seed 3 --threads 2 --log "$tmp/whole.jsonl" >/dev/null || fail "the whole run"
"$kiln" train $m/model.onnx --data $m/train.npz --steps 8 --batch 128 --optimizer adamw \
  --seed 3 --threads 2 --checkpoint "$tmp/ck" >/dev/null || fail "the first part"
"$kiln" train $m/model.onnx --data $m/train.npz --steps 14 --batch 128 --optimizer adamw \
  --seed 3 --threads 2 --resume "$tmp/ck" --log "$tmp/rest.jsonl" >/dev/null || fail "the resumed part"
# (an epoch is 12 batches of 128: the resumed run crosses into the second epoch's order)
want=$(sed -n '9,14p' "$tmp/whole.jsonl" | sed 's/, "ms".*//')
got=$(sed 's/, "ms".*//' "$tmp/rest.jsonl")
[ "$want" = "$got" ] || fail "the resumed run's steps 9-14 differ from the whole run's:
$want
--- resumed:
$got"

# a NaN sample: stop naming the step, or skip it
if [ -x .venv/bin/python ]; then
  .venv/bin/python - "$m/train.npz" "$tmp/nan.npz" <<'EOF'
import sys, numpy as np
d = dict(np.load(sys.argv[1]))
d["x"] = d["x"][:96].copy()
d["target"] = d["target"][:96]
d["x"][40, 3] = np.nan
np.savez(sys.argv[2], **d)
np.savez(sys.argv[2].replace("nan", "notarget"), x=d["x"])
# zipfile writing to a stream it cannot seek puts each entry's sizes and CRC-32 after
# its data (general-purpose flag bit 3, a data descriptor)
import io, struct, zipfile
class Stream(io.RawIOBase):
    def __init__(self, f): self.f = f
    def writable(self): return True
    def write(self, b): return self.f.write(b)
d = dict(np.load(sys.argv[1]))
for method, name in ((zipfile.ZIP_STORED, "dd_stored"), (zipfile.ZIP_DEFLATED, "dd_deflated")):
    with open(sys.argv[2].replace("nan", name), "wb") as raw:
        with zipfile.ZipFile(Stream(raw), "w", compression=method) as z:
            for k, v in d.items():
                with z.open(k + ".npy", "w") as f:
                    np.save(f, v)
# one byte of x's data flipped, the CRC-32s left: numpy refuses it (Bad CRC-32); kiln
# read it as data (libzip checks the CRC only at an entry's end of file)
for name in ("dd_stored", ""):
    src = sys.argv[2].replace("nan", name) if name else sys.argv[1]
    b = bytearray(open(src, "rb").read())
    cd = b.index(b"PK\x01\x02")
    off = struct.unpack_from("<I", b, cd + 42)[0]
    b[off + 30 + sum(struct.unpack_from("<HH", b, off + 26)) + 300] ^= 0x40
    open(sys.argv[2].replace("nan", "crc_" + (name or "plain")), "wb").write(bytes(b))
EOF
  plain=$("$kiln" train $m/model.onnx --data $m/train.npz --steps 3 --no-shuffle 2>&1 | grep -o "last loss.*")
  for f in dd_stored dd_deflated; do
    expect 0 "$plain" -- "$kiln" train $m/model.onnx --data "$tmp/$f.npz" --steps 3 --no-shuffle
  done
  for f in crc_dd_stored crc_plain; do
    expect 1 "array 'x': the entry is truncated or corrupt (CRC error)" -- "$kiln" train $m/model.onnx --data "$tmp/$f.npz" --steps 1
  done
  expect 1 "has no array 'target' (it has: x)" -- "$kiln" train $m/model.onnx --data "$tmp/notarget.npz" --steps 1
  expect 1 "step 2: the loss is nan" -- "$kiln" train $m/model.onnx --data "$tmp/nan.npz" --steps 3 --batch 32 --no-shuffle
  expect 0 "(1 skipped)" -- "$kiln" train $m/model.onnx --data "$tmp/nan.npz" --steps 3 --batch 32 --no-shuffle --skip-nonfinite
fi

[ $fails = 0 ] && echo "kiln train: every case as expected"
exit $((fails > 0))
