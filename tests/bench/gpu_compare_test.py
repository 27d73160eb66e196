#!/usr/bin/env python3
"""bench/gpu_compare.py without a GPU: its reading of ncu's two CSV forms, and one whole
comparison against stand-ins for gpu_train_bench, torch_reference.py and ncu that answer in
their formats (the bench's and the reference's JSON as the repo's own code writes them; ncu's CSV
as Nsight Compute prints it), checking the issue's targets and that exactly the configurations
that miss one are profiled.

usage: gpu_compare_test.py SOURCE_DIR
"""
import json
import os
import stat
import sys
import tempfile
import textwrap
import unittest

SRC = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(SRC, "bench"))
import gpu_compare  # noqa: E402

# ncu --csv --print-units base --metrics gpu__time_duration.sum PROGRAM: the default ("details")
# page, one row per launch and metric, between ncu's own lines and the program's output.
NCU_LONG = textwrap.dedent('''\
    ==PROF== Connected to process 4242 (/tmp/gpu_train_bench)
    mlp  batch    64      312000 samples/s    0.205 ms/step  busy 0.57  nvml util 0.61  graph
    ==PROF== Profiling "gemm_kernel" - 0: 0%....50%....100% - 1 pass
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
    "0","4242","gpu_train_bench","127.0.0.1","gemm_kernel","1","13","(256, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","12,000"
    "1","4242","gpu_train_bench","127.0.0.1","bias_relu(const float *, float *, int)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","3,000"
    "2","4242","gpu_train_bench","127.0.0.1","gemm_kernel","1","13","(256, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","13,000"
    "3","4242","gpu_train_bench","127.0.0.1","adam_step","1","13","(256, 1, 1)","(800, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","2"
    ==PROF== Disconnected from process 4242
    ''')

# The same launches with --page raw: a column per metric, then a row of units.
NCU_WIDE = textwrap.dedent('''\
    ==PROF== Connected to process 4242
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__time_duration.sum"
    "","","","","","","","usecond"
    "0","4242","bench","h","gemm_kernel","1","13","12"
    "1","4242","bench","h","bias_relu(const float *, float *, int)","1","13","3"
    "2","4242","bench","h","gemm_kernel","1","13","13"
    ''')


def write_exe(path, body):
    with open(path, "w") as f:
        f.write("#!" + sys.executable + "\n" + textwrap.dedent(body))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class ParseNcuCsvTest(unittest.TestCase):
    def check(self, kernels):
        self.assertEqual([k["name"] for k in kernels][:2],
                         ["gemm_kernel", "bias_relu(const float *, float *, int)"])
        gemm = kernels[0]
        self.assertEqual(gemm["launches"], 2)
        self.assertAlmostEqual(gemm["total_us"], 25.0)
        self.assertAlmostEqual(gemm["mean_us"], 12.5)
        self.assertAlmostEqual(sum(k["share"] for k in kernels), 1.0)

    def test_long_form_with_units_and_thousands_separators(self):
        kernels = gpu_compare.parse_ncu_csv(NCU_LONG)
        self.check(kernels)
        self.assertEqual(len(kernels), 3)
        adam = next(k for k in kernels if k["name"] == "adam_step")
        self.assertAlmostEqual(adam["total_us"], 2.0)  # usecond, not nanoseconds
        self.assertAlmostEqual(kernels[0]["share"], 25.0 / 30.0)

    def test_wide_form_takes_the_units_row(self):
        kernels = gpu_compare.parse_ncu_csv(NCU_WIDE)
        self.check(kernels)
        self.assertEqual(len(kernels), 2)

    def test_no_table_is_no_kernels(self):
        self.assertEqual(gpu_compare.parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM\nsome output\n"), [])
        self.assertEqual(gpu_compare.parse_ncu_csv('"ID","Kernel Name"\n"0","k"\n'), [])


class CompareFlowTest(unittest.TestCase):
    def test_targets_and_profiles_of_the_configurations_that_miss_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            bench, python, ncu = (os.path.join(tmp, n) for n in ("bench", "python", "ncu"))
            calls = os.path.join(tmp, "calls.jsonl")
            # gpu_train_bench: the JSON of bench/gpu_train_bench.cc. mlp@64 3x PyTorch; mlp@1024
            # and cnn@1024 busy 0.8; cnn@64 1.1x PyTorch.
            out = os.path.join(tmp, "compare.json")
            write_exe(bench, f'''
                import json, os, sys
                a = sys.argv[1:]
                v = lambda k: a[a.index(k) + 1]
                rows = json.load(open({out!r})).get("rows", []) if os.path.exists({out!r}) else []
                open({calls!r}, "a").write(json.dumps({{"tool": "bench", "argv": a,
                                                       "rows_on_disk": len(rows)}}) + "\\n")
                m, b = v("--model"), int(v("--batch-size"))
                sps = {{("mlp", 64): 300000, ("mlp", 1024): 2000000, ("cnn", 64): 110000,
                        ("cnn", 1024): 900000}}[(m, b)]
                busy = 0.95 if b == 64 else 0.8
                json.dump({{"model": m, "batch_size": b, "optimizer": "adam", "precision": "fp32",
                           "input": "device", "cuda_graph": True, "steps": int(v("--steps")),
                           "samples_per_second": sps, "step_ms": 1000.0 * b / sps,
                           "busy_ratio": busy, "nvml_utilization": 0.97 if b == 1024 else 0.7,
                           "device": "NVIDIA H100 80GB HBM3"}}, open(v("--json"), "w"))
                ''')
            # python torch_reference.py ...: its JSON; with --profile-steps, the profile.
            write_exe(python, f'''
                import json, sys
                a = sys.argv[2:]
                v = lambda k: a[a.index(k) + 1]
                open({calls!r}, "a").write(json.dumps({{"tool": "torch", "argv": a}}) + "\\n")
                m = v("--model")
                res = []
                for b in (int(x) for x in v("--batch-size").split(",")):
                    sps = {{"mlp": 100000, "cnn": 100000}}[m] * (b // 64) ** 0.5
                    r = {{"model": m, "batch_size": b, "steps": 1, "warmup": 1, "seconds": 1,
                          "samples_per_second": sps, "step_ms": 1000.0 * b / sps,
                          "final_loss": 0.5, "epochs_started": 1}}
                    if "--profile-steps" in a:
                        r["profile"] = {{"steps": 20, "step_ms": 0.6, "kernel_ms_per_step": 0.3,
                                        "busy": 0.5, "kernel_kinds": 1,
                                        "kernels": [{{"name": "ampere_sgemm", "us_per_step": 300.0,
                                                     "launches_per_step": 3.0, "share": 1.0}}]}}
                    res.append(r)
                json.dump({{"tool": "torch_reference", "torch_version": "2.11.0+cu130",
                           "device_name": "NVIDIA H100 80GB HBM3", "results": res}},
                          open(v("--json"), "w"))
                ''')
            # ncu also notes whether the measured rows were already on disk when it ran.
            write_exe(ncu, f'''
                import json, os, sys
                rows = json.load(open({out!r}))["rows"] if os.path.exists({out!r}) else []
                open({calls!r}, "a").write(json.dumps({{"tool": "ncu", "argv": sys.argv[1:],
                                                       "rows_on_disk": len(rows)}}) + "\\n")
                sys.stdout.write({NCU_LONG!r})
                ''')
            rc = gpu_compare.main(["--bench", bench, "--python", python, "--ncu", ncu,
                                   "--models", "mlp,cnn", "--batch-sizes", "64,1024",
                                   "--steps", "10", "--warmup", "1", "--min-seconds", "0",
                                   "--data", tmp, "--out", out])
            self.assertEqual(rc, 0)
            with open(out) as f:
                doc = json.load(f)
            self.assertFalse(doc["no_gpu"])
            met = {(t["target"], t["model"], t["batch_size"]): t["met"] for t in doc["targets"]}
            self.assertEqual(met, {
                ("MLP@64 ringtrain/PyTorch >= 2", "mlp", 64): True,
                ("busy >= 0.9", "mlp", 1024): False,
                ("NVML utilization >= 0.9", "mlp", 1024): True,
                ("CNN ringtrain/PyTorch >= 1.2", "cnn", 64): False,
                ("CNN ringtrain/PyTorch >= 1.2", "cnn", 1024): True,
                ("busy >= 0.9", "cnn", 1024): False,
                ("NVML utilization >= 0.9", "cnn", 1024): True,
            })
            self.assertFalse(doc["targets_met"])
            # Three configurations miss a target; --profile-max 2 profiles the first two.
            profiled = [(p["model"], p["batch_size"]) for p in doc["profiles"]]
            self.assertEqual(profiled, [("mlp", 1024), ("cnn", 64)])
            self.assertEqual(doc["profiles_left_out"], ["cnn@1024"])
            p = doc["profiles"][0]
            self.assertEqual(p["unmet"], ["busy >= 0.9"])
            step = 1000.0 * 1024 / 2000000
            self.assertAlmostEqual(p["ringtrain_events"]["step_ms"], step)
            self.assertAlmostEqual(p["ringtrain_events"]["kernel_ms"], step * 0.8)
            self.assertEqual([k["name"] for k in p["ncu"]["kernels"]][0], "gemm_kernel")
            self.assertEqual(p["torch_profiler"]["kernels"][0]["name"], "ampere_sgemm")
            with open(calls) as f:
                runs = [json.loads(line) for line in f]
            ncu_runs = [r["argv"] for r in runs if r["tool"] == "ncu"]
            self.assertEqual(len(ncu_runs), 2)
            # Each model's rows were on disk before the next model was measured.
            self.assertEqual([r["rows_on_disk"] for r in runs if r["tool"] == "bench"],
                             [0, 0, 2, 2])
            # The comparison was written before the first profile started.
            self.assertEqual([r["rows_on_disk"] for r in runs if r["tool"] == "ncu"], [4, 4])
            self.assertIn(bench, ncu_runs[0])
            self.assertEqual(ncu_runs[0][ncu_runs[0].index("--model") + 1], "mlp")
            self.assertEqual(ncu_runs[0][ncu_runs[0].index("--batch-size") + 1], "1024")
            torch_profiles = [r["argv"] for r in runs
                              if r["tool"] == "torch" and "--profile-steps" in r["argv"]]
            self.assertEqual(len(torch_profiles), 2)

            # A deadline too close for one more profile: none starts, each is said left out.
            os.remove(calls)
            rc = gpu_compare.main(["--bench", bench, "--python", python, "--ncu", ncu,
                                   "--models", "mlp,cnn", "--batch-sizes", "64,1024",
                                   "--steps", "10", "--warmup", "1", "--min-seconds", "0",
                                   "--data", tmp, "--out", out, "--deadline-seconds", "100",
                                   "--profile-timeout", "60"])
            self.assertEqual(rc, 0)
            with open(out) as f:
                doc = json.load(f)
            self.assertEqual(doc["profiles"], [])
            self.assertEqual(len(doc["profiles_left_out"]), 3)
            self.assertIn("mlp@1024 (deadline", doc["profiles_left_out"][1])
            with open(calls) as f:
                self.assertFalse(any(json.loads(line)["tool"] == "ncu" for line in f))

    def test_without_ncu_the_events_are_the_profile(self):
        row = {"model": "mlp", "batch_size": 64, "targets": [],
               "ringtrain": {"step_ms": 0.2, "busy_ratio": 0.5}, "torch": {"step_ms": 0.4}}

        class Args:
            ncu = "/nonexistent/ncu"
            python = "/nonexistent/python"
            data = "/nonexistent"
            tf32 = False
            torch_arg = []
            profile_timeout = 5

        with tempfile.TemporaryDirectory() as tmp:
            p = gpu_compare.profile_config(Args, row, tmp)
        self.assertIn("ncu not found", p["ncu"]["error"])
        self.assertAlmostEqual(p["ringtrain_events"]["other_ms"], 0.1)
        self.assertIn("error", p["torch_profiler"])


if __name__ == "__main__":
    unittest.main()
