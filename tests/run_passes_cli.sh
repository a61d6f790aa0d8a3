#!/usr/bin/env bash
# `kiln inspect --stats/--dot` and `kiln optimize` on the digits models: the stats name
# what fired, the dot file is a graph, and the optimized ONNX file passes the model's
# own test data when kiln runs it as saved (-O0) and after optimizing it again (-O2);
# a written model repeats no node name.
#
#   tests/run_passes_cli.sh KILN_BINARY        (from the source root)
. "$(dirname "$0")/cli_common.sh"

for m in digits_cnn digits_cnn_fused digits_mlp; do
  stats=$("$kiln" inspect "models/$m/model.onnx" --stats) || fail "$m: inspect --stats"
  grep -Eq '^  fuse_act +[1-9]' <<<"$stats" || fail "$m: fuse_act did not fire"
  grep -q '^  BatchNormalization .* 0$' <<<"$stats" ||
    [ "$m" = digits_cnn_fused ] || fail "$m: a BatchNormalization is left"
  "$kiln" inspect "models/$m/model.onnx" --dot "$work/$m.dot" >/dev/null || fail "$m: --dot"
  head -1 "$work/$m.dot" | grep -q '^digraph kiln {$' || fail "$m: the dot file is not a graph"
  mkdir -p "$work/$m"
  cp -r "models/$m"/test_data_set_* "$work/$m/"
  "$kiln" optimize "models/$m/model.onnx" -o "$work/$m/model.onnx" >/dev/null || fail "$m: optimize"
  for level in -O0 -O2; do
    "$kiln" check "$level" --verify "$work/$m" >/dev/null || fail "$m: the optimized file at $level"
  done
done
# Control flow: the dot file draws each body as a cluster (an If in an If's else_branch
# four: two branches each), `kiln inspect` prints the bodies indented, and the If on a folded
# condition is gone by -O1 (inline_if) while -O0 keeps it.
"$kiln" inspect tests/models/control/if_shapes/model.onnx --dot "$work/if.dot" >/dev/null ||
  fail "if_shapes: --dot"
# a FIFO that no program reads: refused at once (opening it waited for one forever)
mkfifo "$work/fifo"
err=$(timeout 10 "$kiln" inspect models/digits_mlp/model.onnx --dot "$work/fifo" 2>&1 >/dev/null)
[ $? = 1 ] && grep -qF "kiln inspect: $work/fifo is a FIFO that no program reads" <<<"$err" ||
  fail "--dot FIFO: $err"
[ "$(grep -c '^  subgraph cluster_b[0-9]*_ {$' "$work/if.dot")" = 4 ] ||
  fail "if_shapes: the dot file does not have the 4 bodies as clusters"
"$kiln" inspect -O0 tests/models/control/if_shapes/model.onnx | grep -q '^            body: ' ||
  fail "if_shapes: inspect does not print the nested bodies"
stats=$("$kiln" inspect -O1 tests/models/control/if_static/model.onnx --stats) || fail "if_static: --stats"
grep -Eq '^  inline_if +1 ' <<<"$stats" || fail "if_static: inline_if did not fire"
grep -Eq '^  If +1 +0$' <<<"$stats" || fail "if_static: an If is left at -O1"
# A model exported with a dynamic batch computes its Reshape targets from Shape(x) at run
# time (tests/models/make_dyn_fixtures.py): shape_values makes them constant, so each
# layer's attention still fuses, as it does with a static batch.
stats=$("$kiln" inspect tests/models/dyn_bert/model.onnx --stats) || fail "dyn_bert: inspect --stats"
grep -Eq '^  kiln.MultiHeadAttention +0 +2$' <<<"$stats" ||
  fail "dyn_bert: the 2 layers' attention did not fuse: $(grep -E 'MultiHead|^nodes' <<<"$stats")"
grep -Eq '^  kiln.SkipLayerNorm +0 +4$' <<<"$stats" || fail "dyn_bert: SkipLayerNorm did not fuse"
# the sequence dynamic too: the position ids arange(32)[:seq] are at most seq long
stats=$("$kiln" inspect tests/models/dyn_bert_seq/model.onnx --stats) || fail "dyn_bert_seq: --stats"
grep -Eq '^  kiln.MultiHeadAttention +0 +2$' <<<"$stats" ||
  fail "dyn_bert_seq: the 2 layers' attention did not fuse: $(grep -E 'MultiHead|^nodes' <<<"$stats")"

# transformers' default attention ("sdpa") as torch.onnx writes it, both exporters: Q and
# K each scaled, Where(IsNaN) after the softmax; each layer still one MultiHeadAttention,
# which gives 0 where every key is masked (zero_masked_rows).
for m in dyn_bert_sdpa dyn_bert_sdpa_dynamo; do
  stats=$("$kiln" inspect tests/models/$m/model.onnx --stats) || fail "$m: --stats"
  grep -Eq '^  kiln.MultiHeadAttention +0 +2$' <<<"$stats" ||
    fail "$m: the 2 layers' attention did not fuse: $(grep -E 'MultiHead|^nodes' <<<"$stats")"
  grep -Eq '^  IsNaN +2 +0$' <<<"$stats" || fail "$m: an IsNaN is left"
  [ "$("$kiln" inspect tests/models/$m/model.onnx | grep -c 'zero_masked_rows=1')" = 2 ] ||
    fail "$m: not every MultiHeadAttention has zero_masked_rows=1"
done
# written and read back, the attribute stays: the row of padding alone gives PyTorch's 0
mkdir -p "$work/sdpa"
cp -r tests/models/dyn_bert_sdpa/test_data_set_0 "$work/sdpa/"
"$kiln" optimize tests/models/dyn_bert_sdpa/model.onnx -o "$work/sdpa/model.onnx" >/dev/null ||
  fail "dyn_bert_sdpa: optimize"
"$kiln" check -O0 --verify "$work/sdpa" >/dev/null || fail "dyn_bert_sdpa: the optimized file"

# Node names in a written model are unique, as ONNX requires and onnxruntime checks: a
# TorchScript trace repeats them (layers.0.self_attn/size for a Shape and a Gather).
"$kiln" optimize tests/models/ts/transformer/model.pt -o "$work/tr.onnx" >/dev/null ||
  fail "optimize a .pt"
dups=$("$kiln" inspect "$work/tr.onnx" -O0 | sed -n "s/^  #[0-9]* [^ ]* '\(.*\)'$/\1/p" | sort | uniq -d)
[ -z "$dups" ] || fail "the optimized .pt repeats node names: $(head -3 <<<"$dups" | tr '\n' ' ')"
"$kiln" inspect "$work/tr.onnx" -O0 | grep -q "^  #0 " || fail "inspect of the optimized .pt"

# -O3's layout pass (forced on, so that a build without oneDNN tests it too) leaves one
# Transpose in digits_cnn, out of the GlobalAveragePool (the first Conv reads the image
# as it is); the saved file runs as saved and again at -O3.
stats=$("$kiln" inspect models/digits_cnn/model.onnx -O3 --passes +layout --stats) ||
  fail "digits_cnn: inspect -O3"
grep -Eq '^  Transpose +0 +1$' <<<"$stats" || fail "digits_cnn: -O3 does not leave 1 Transpose"
grep -Eq '^  kiln.NhwcMaxPool +0 +1$' <<<"$stats" || fail "digits_cnn: no channels-last MaxPool"
mkdir -p "$work/o3"
cp -r models/digits_cnn/test_data_set_* "$work/o3/"
"$kiln" optimize models/digits_cnn/model.onnx -O3 --passes +layout -o "$work/o3/model.onnx" \
  >/dev/null || fail "digits_cnn: optimize -O3"
for level in -O0 -O3; do
  "$kiln" check "$level" --verify "$work/o3" >/dev/null || fail "digits_cnn: the -O3 file at $level"
done
"$kiln" optimize models/digits_cnn/model.onnx >/dev/null 2>&1
[ $? -eq 2 ] || fail "optimize without -o is not a usage error"
# options that do not apply to a command: refused, and not listed in its help
err=$("$kiln" optimize models/digits_cnn/model.onnx -o "$work/x.onnx" --threads 2 2>&1)
[ $? -eq 2 ] && grep -q 'threads does not apply here' <<<"$err" ||
  fail "optimize --threads was not refused: $err"
"$kiln" optimize --help | grep -qE -- '--threads|--pin|--keep-weights|--fast-only' &&
  fail "optimize --help lists run options"
"$kiln" check --help | grep -q -- '--keep-weights' && fail "check --help lists --keep-weights"
"$kiln" bench --help | grep -q -- '--keep-weights' || fail "bench --help lacks --keep-weights"
"$kiln" inspect models/digits_cnn/model.onnx --passes +nonesuch >/dev/null 2>&1
[ $? -eq 1 ] || fail "an unknown pass name is not refused"
echo "$failed failed"
[ "$failed" -eq 0 ]
