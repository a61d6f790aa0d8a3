#!/usr/bin/env bash
# kiln check binds a data set's files to the model's inputs and outputs by the names the
# TensorProtos hold, else by position (tests/models/check_names: x, w -> a = x + w,
# b = x - w, which differ at every element):
#   - expected outputs swapped (output_0.pb named 'b' with b's values, output_1.pb 'a'):
#     each compared with the output it names; passes, no note (they were taken by
#     position, silently, and failed on the values);
#   - output_0.pb named 'sum', which no output is: taken by position, with a note on
#     stderr as for inputs (it was taken so without one); without a name: no note;
#   - two files for one output (output_0.pb without a name, so taken by position as 'a',
#     and output_1.pb named 'a'; or both named 'a'): refused, naming the folder, the
#     file and how each was matched;
#   - an output out of tolerance whose file is not output_K.pb of its index: the reason
#     names the file;
#   - inputs swapped: bound by name; two files for one input: refused likewise.
#
#   tests/run_check_names.sh KILN_BINARY        (from the source root)
. "$(dirname "$0")/cli_common.sh"

src=tests/models/check_names
set0=$src/test_data_set_0
# case_dir NAME FILE=FROM...: $work/NAME, the fixture with each FILE of test_data_set_0
# replaced by FROM (relative to $src)
case_dir() {
  local d=$work/$1
  shift
  mkdir -p "$d/test_data_set_0"
  cp "$src/model.onnx" "$d/"
  cp "$set0"/*.pb "$d/test_data_set_0/"
  for p in "$@"; do cp "$src/${p#*=}" "$d/test_data_set_0/${p%%=*}"; done
}
# check NAME: kiln check on $work/NAME; stdout in $out, stderr in $err, exit code in $rc
check() {
  out=$(timeout -k 2 10 "$kiln" check "$work/$1" 2>"$work/err")
  rc=$?
  err=$(cat "$work/err")
}
pass_line() { [ "$out" = "pass $work/$1 (1 data set; max abs err 0, max rel err 0)
1 passed, 0 failed" ]; }

case_dir named
check named
[ $rc -eq 0 ] && pass_line named && [ -z "$err" ] || fail "named as the model's: rc $rc: $out $err"

case_dir swapped output_0.pb=test_data_set_0/output_1.pb output_1.pb=test_data_set_0/output_0.pb
check swapped
[ $rc -eq 0 ] && pass_line swapped && [ -z "$err" ] || fail "outputs swapped: rc $rc: $out $err"

case_dir renamed output_0.pb=variants/a_as_sum.pb
check renamed
[ $rc -eq 0 ] && pass_line renamed || fail "output_0.pb named 'sum': rc $rc: $out $err"
[ "$err" = "kiln check: $work/renamed: note: the expected outputs of test_data_set_0 are not named as the model's: taken by position (output_0.pb 'sum' as 'a')" ] ||
  fail "output_0.pb named 'sum': the note: $err"

case_dir unnamed output_0.pb=variants/a_unnamed.pb
check unnamed
[ $rc -eq 0 ] && pass_line unnamed && [ -z "$err" ] || fail "output_0.pb without a name: rc $rc: $out $err"

case_dir position_then_name output_0.pb=variants/a_unnamed.pb output_1.pb=test_data_set_0/output_0.pb
check position_then_name
d=$work/position_then_name
[ $rc -eq 1 ] && [ "$out" = "FAIL $d
0 passed, 1 failed" ] && [ "$err" = "kiln check: $d: test_data_set_0: $d/test_data_set_0/output_1.pb is for output 'a' too (by its name), which an earlier file gave (output_0.pb, by its position)" ] ||
  fail "two files for output 'a', by position and by name: rc $rc: $out $err"

case_dir twice output_1.pb=test_data_set_0/output_0.pb
check twice
d=$work/twice
[ $rc -eq 1 ] && [ "$err" = "kiln check: $d: test_data_set_0: $d/test_data_set_0/output_1.pb is for output 'a' too (by its name), which an earlier file gave (output_0.pb, by its name)" ] ||
  fail "two files named 'a': rc $rc: $out $err"

case_dir wrong output_0.pb=variants/b_wrong.pb output_1.pb=test_data_set_0/output_0.pb
check wrong
[ $rc -eq 1 ] && grep -q "^kiln check: $work/wrong: test_data_set_0: output 1 'b' (file output_0.pb): 3 of 3 values out of tolerance, the first at element 0: 0.5, expected 1;" <<<"$err" ||
  fail "b out of tolerance in output_0.pb: rc $rc: $out $err"

case_dir inputs_swapped input_0.pb=test_data_set_0/input_1.pb input_1.pb=test_data_set_0/input_0.pb
check inputs_swapped
[ $rc -eq 0 ] && pass_line inputs_swapped && [ -z "$err" ] || fail "inputs swapped: rc $rc: $out $err"

case_dir inputs_twice input_1.pb=test_data_set_0/input_0.pb
check inputs_twice
d=$work/inputs_twice
[ $rc -eq 1 ] && [ "$err" = "kiln check: $d: test_data_set_0: $d/test_data_set_0/input_1.pb is for input 'x' too (by its name), which an earlier file gave (input_0.pb, by its name)" ] ||
  fail "two files named 'x': rc $rc: $out $err"

[ $failed -eq 0 ] && echo "all passed" || echo "$failed failed"
[ $failed -eq 0 ]
