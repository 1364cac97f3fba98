"""``kvtop bench``'s test parameters as llama-bench parses them: comma lists, ranges, and
every combination in llama-bench's order, grouped by engine load. No model."""

import argparse

import pytest

from kvtop.runner.commands import bench
from kvtop.runner.commands.bench_plan import (
    BenchTest,
    Lists,
    Load,
    bench_label,
    fa_list,
    int_list,
    kv_type_list,
    pg_pair,
    plan,
)


def parse(*argv):
    return bench.build_parser().parse_args(["m.gguf", *argv])


@pytest.mark.parametrize("text,values", [
    ("512", [512]), ("128,512", [128, 512]), ("1-4", [1, 2, 3, 4]), ("1-8+3", [1, 4, 7]),
    ("64-512*2", [64, 128, 256, 512]), ("0,16-32+16", [0, 16, 32]), (" 8 , 16 ", [8, 16]),
])
def test_int_lists_and_ranges_as_llama_bench_parse_int_range(text, values):
    assert int_list(0)(text) == values


@pytest.mark.parametrize("text,why", [
    ("-1", "must be an integer from 0"), ("x", "must be an integer"), ("1,,2", "must be an integer"),
    ("512-128", "grows"), ("1-8+0", "grows"), ("1-8*1", "grows"), ("0-8*2", "grows"),
    ("1-100000", "at most 1,000 values"),
])
def test_bad_lists_are_usage_errors_that_say_why(text, why):
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        int_list(0)(text)


def test_ngl_takes_minus_one_and_other_lists_do_not():
    assert int_list(-1)("-1,0,99") == [-1, 0, 99]
    assert int_list(-1)("-1-1") == [-1, 0, 1]
    with pytest.raises(argparse.ArgumentTypeError):
        int_list(1)("0")


def test_flash_attention_kv_types_and_pairs():
    assert fa_list("0,1,auto") == ["off", "on", "auto"]
    assert fa_list("on,off,-1,enabled,disabled") == ["on", "off", "auto", "on", "off"]
    assert kv_type_list("q8_0,F16") == ["q8_0", "f16"]
    assert pg_pair("512,128") == (512, 128)
    for bad, fn in (("maybe", fa_list), ("q3_k", kv_type_list), ("512", pg_pair), ("1,2,3", pg_pair)):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(bad)


def test_the_parser_takes_llama_bench_flags_and_repeats_add_to_a_list():
    a = parse("-p", "128,512", "-p", "1024", "-n", "16", "-pg", "512,128", "-pg", "64,16", "-d", "0,1024",
              "-t", "1-2", "-b", "256", "-ub", "64,128", "-ctk", "q8_0,f16", "-ctv", "q8_0", "-fa", "0,1",
              "-ngl", "0,99", "-r", "5", "-o", "csv")
    lists = bench.lists_from_args(a)
    assert lists.n_prompt == [128, 512, 1024] and lists.n_gen == [16] and lists.n_pg == [(512, 128), (64, 16)]
    assert lists.n_depth == [0, 1024] and lists.n_threads == [1, 2] and lists.n_batch == [256]
    assert lists.n_ubatch == [64, 128] and lists.type_k == ["q8_0", "f16"] and lists.type_v == ["q8_0"]
    assert lists.flash_attn == ["off", "on"] and lists.n_gpu_layers == [0, 99]
    assert a.repetitions == 5 and a.output == "csv"


def test_defaults_are_kvtops_and_a_bare_fa_means_on():
    lists = bench.lists_from_args(parse())
    assert lists == Lists([512], [128], [], [0], [0], [512], [512], ["f16"], ["f16"], ["auto"], [0])
    assert bench.lists_from_args(parse("-fa")).flash_attn == ["on"]
    assert parse().repetitions == 3 and parse().output is None and parse().warmup


@pytest.mark.parametrize("argv", [["-o", "xml"], ["-p", "-1"], ["-n", "1,-2"], ["-ub", "0"], ["-t", "513"],
                                  ["-ctk", "q2_k"], ["-fa", "yes"], ["-pg", "512"], ["-d", "x"], ["-r", "0"]])
def test_bad_values_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and ("must be" in err or "invalid choice" in err), err


def test_labels_are_llama_benchs():
    assert bench_label(512, 0) == "pp512"
    assert bench_label(0, 128) == "tg128"
    assert bench_label(512, 128) == "pp512+tg128"
    assert bench_label(512, 0, 1024) == "pp512 @ d1024"
    assert bench_label(0, 128, 1024) == "tg128 @ d1024"
    assert bench_label(512, 128, 4096) == "pp512+tg128 @ d4096"
    assert BenchTest(0, 32, 0).kind == "tg" and BenchTest(8, 0).kind == "pp" and BenchTest(8, 2, 5).kind == "pg"


def test_every_combination_runs_in_llama_benchs_order_one_load_per_load_setting():
    lists = bench.lists_from_args(parse("-p", "64,128", "-n", "16", "-pg", "32,8", "-d", "0,256", "-t", "1,2",
                                        "-fa", "0,1"))
    runs = plan(lists)
    assert [load for load, _ in runs] == [Load(0, 512, 512, "f16", "f16", fa, t)
                                          for fa in ("off", "on") for t in (1, 2)]
    for _, tests in runs:
        assert [t.label for t in tests] == ["pp64", "pp128", "tg16", "pp32+tg8",
                                            "pp64 @ d256", "pp128 @ d256", "tg16 @ d256", "pp32+tg8 @ d256"]


def test_zero_drops_a_test_as_in_llama_bench():
    assert [t.label for _, ts in plan(bench.lists_from_args(parse("-p", "0,16", "-n", "0"))) for t in ts] == ["pp16"]
    assert plan(bench.lists_from_args(parse("-p", "0", "-n", "0"))) == []
    assert [t.label for _, ts in plan(bench.lists_from_args(parse("-p", "0", "-n", "0", "-pg", "0,8")))
            for t in ts] == ["tg8"]


def test_the_context_a_test_needs_covers_depth_prompt_and_generation():
    assert BenchTest(512, 0).ctx_needed() >= 513
    assert BenchTest(0, 128).ctx_needed() >= 1 + 128 + 1  # one BOS, 128 decodes, the last sample
    assert BenchTest(512, 128, 1024).ctx_needed() >= 1024 + 512 + 128 + 1
