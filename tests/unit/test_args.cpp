// Command-line flags: defaults, both spellings of every flag, group gating, and the exit-2 errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "args.h"
#include "mlp.h"

namespace {

constexpr unsigned kAll = ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER | ARGS_REDUCER | ARGS_FAULT;

// argv built from std::string storage; Args keeps pointers into it, so it must outlive the Args.
struct Argv {
  std::vector<std::string> s;
  std::vector<char *> p;
  Argv(std::initializer_list<std::string> args) : s{"prog"} {
    s.insert(s.end(), args.begin(), args.end());
    for (auto &x : s) p.push_back(x.data());
    p.push_back(nullptr);
  }
  int argc() const { return (int)s.size(); }
  char **argv() { return p.data(); }
};

void parse(Args *a, Argv &v, unsigned groups = kAll) { args_parse(a, v.argc(), v.argv(), groups, "test"); }

// Runs a parse that must end the process; used inside EXPECT_EXIT.
void parse_and_exit(std::initializer_list<std::string> args, unsigned groups = kAll) {
  Argv v(args);
  Args a;
  parse(&a, v, groups);
  std::exit(100);  // parse returned: not the expected exit
}

}  // namespace

TEST(Args, Defaults) {
  Argv v({});
  Args a;
  parse(&a, v);
  EXPECT_EQ(a.epochs, 3);
  EXPECT_EQ(a.batch_size, 128);
  EXPECT_FLOAT_EQ(a.lr, 0.05f);
  EXPECT_FLOAT_EQ(a.momentum, 0.9f);
  EXPECT_EQ(a.weight_decay, 0.0f);
  EXPECT_EQ(a.dataset_size, 0);
  EXPECT_EQ(a.save_interval, 1);
  EXPECT_STREQ(a.device, "auto");
  EXPECT_STREQ(a.data, "fashion-mnist");
  EXPECT_EQ(a.data_dir, nullptr);
  EXPECT_STREQ(a.hidden, "1024,1024");
  EXPECT_EQ(a.seed, 42u);
  EXPECT_EQ(a.metrics, nullptr);
  EXPECT_STREQ(a.ckpt_dir, "checkpoints/prog");  // each program its own folder
  EXPECT_EQ(a.resume, nullptr);
  EXPECT_EQ(a.max_steps, 0);
  EXPECT_EQ(a.log_interval, 50);
  EXPECT_STREQ(a.backend, "auto");
  EXPECT_FLOAT_EQ(a.timeout, 300.0f);
  EXPECT_FALSE(a.tf32);
  EXPECT_FALSE(a.drop_last);
  EXPECT_FLOAT_EQ(a.bucket_cap_mb, 25.0f);
  EXPECT_EQ(a.grad_accum, 1);
  EXPECT_EQ(a.trace, nullptr);
}

TEST(Args, EveryFlagParsesInBothSpellings) {
  struct Case {
    std::string flag, value;
    std::function<void(const Args &)> check;
  };
  std::vector<Case> cases = {
      {"epochs", "7", [](const Args &a) { EXPECT_EQ(a.epochs, 7); }},
      {"batch_size", "64", [](const Args &a) { EXPECT_EQ(a.batch_size, 64); }},
      {"lr", "0.125", [](const Args &a) { EXPECT_EQ(a.lr, 0.125f); }},
      {"momentum", "0", [](const Args &a) { EXPECT_EQ(a.momentum, 0.0f); }},
      {"weight_decay", "1e-4", [](const Args &a) { EXPECT_EQ(a.weight_decay, 1e-4f); }},
      {"dataset_size", "1000", [](const Args &a) { EXPECT_EQ(a.dataset_size, 1000); }},
      {"save_interval", "0", [](const Args &a) { EXPECT_EQ(a.save_interval, 0); }},
      {"device", "cuda", [](const Args &a) { EXPECT_STREQ(a.device, "cuda"); }},
      {"data", "synthetic", [](const Args &a) { EXPECT_STREQ(a.data, "synthetic"); }},
      {"data_dir", "/d/mnist", [](const Args &a) { EXPECT_STREQ(a.data_dir, "/d/mnist"); }},
      {"hidden", "256,128,64", [](const Args &a) { EXPECT_STREQ(a.hidden, "256,128,64"); }},
      {"seed", "18446744073709551615", [](const Args &a) { EXPECT_EQ(a.seed, UINT64_MAX); }},
      {"metrics", "m_{rank}.jsonl", [](const Args &a) { EXPECT_STREQ(a.metrics, "m_{rank}.jsonl"); }},
      {"ckpt_dir", "ck", [](const Args &a) { EXPECT_STREQ(a.ckpt_dir, "ck"); }},
      {"resume", "ck/last.bin", [](const Args &a) { EXPECT_STREQ(a.resume, "ck/last.bin"); }},
      {"max_steps", "20", [](const Args &a) { EXPECT_EQ(a.max_steps, 20); }},
      {"log_interval", "1", [](const Args &a) { EXPECT_EQ(a.log_interval, 1); }},
      {"backend", "mpi", [](const Args &a) { EXPECT_STREQ(a.backend, "mpi"); }},
      {"bucket_cap_mb", "0.5", [](const Args &a) { EXPECT_EQ(a.bucket_cap_mb, 0.5f); }},
      {"grad_accum", "4", [](const Args &a) { EXPECT_EQ(a.grad_accum, 4); }},
      {"trace", "t.json", [](const Args &a) { EXPECT_STREQ(a.trace, "t.json"); }},
      {"save_steps", "25", [](const Args &a) { EXPECT_EQ(a.save_steps, 25); }},
      {"resume", "auto", [](const Args &a) { EXPECT_STREQ(a.resume, ARGS_RESUME_AUTO); }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.flag);
    Argv sep({"--" + c.flag, c.value});
    Args a;
    parse(&a, sep);
    c.check(a);
    Argv eq({"--" + c.flag + "=" + c.value});
    Args b;
    parse(&b, eq);
    c.check(b);
  }
  Argv v({"--drop_last"});
  Args a;
  parse(&a, v);
  EXPECT_TRUE(a.drop_last);
}

TEST(Args, SeveralFlagsTogetherAndLastWins) {
  Argv v({"--epochs", "2", "--lr=0.1", "--drop_last", "--epochs=5", "--hidden", "", "--data", "mnist"});
  Args a;
  parse(&a, v);
  EXPECT_EQ(a.epochs, 5);
  EXPECT_EQ(a.lr, 0.1f);
  EXPECT_TRUE(a.drop_last);
  EXPECT_STREQ(a.hidden, "");  // no hidden layer: a linear model
  EXPECT_STREQ(a.data, "mnist");
}

TEST(Args, NegativeNumbersAreValuesNotFlags) {
  Argv v({"--epochs", "-1"});
  EXPECT_EXIT(
      {
        Args a;
        parse(&a, v);
        std::exit(100);
      },
      ::testing::ExitedWithCode(2), "--epochs must be >= 1 \\(got -1\\)");
}

TEST(Args, GroupGating) {
  Argv v({"--epochs", "2"});
  Args a;
  parse(&a, v, ARGS_TRAIN);  // step 01 accepts its own flags
  EXPECT_EQ(a.epochs, 2);
  EXPECT_EXIT(parse_and_exit({"--backend", "nccl"}, ARGS_TRAIN), ::testing::ExitedWithCode(2),
              "error: --backend is not available in this step \\(it arrives with the process group "
              "in step 02\\)");
  EXPECT_EXIT(parse_and_exit({"--drop_last"}, ARGS_TRAIN | ARGS_DIST), ::testing::ExitedWithCode(2),
              "--drop_last is not available in this step \\(it arrives with the distributed "
              "sampler in step 03\\)");
  EXPECT_EXIT(parse_and_exit({"--grad_accum=2"}, ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER),
              ::testing::ExitedWithCode(2),
              "--grad_accum is not available in this step \\(it arrives with the bucketed reducer "
              "in step 06\\)");
  // Steps 01-05 take --resume FILE only: "auto" there would be opened as a file named auto.
  EXPECT_EXIT(parse_and_exit({"--resume", "auto"}, ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER),
              ::testing::ExitedWithCode(2),
              "--resume auto is not available in this step \\(it arrives with the restarts in step 06\\): "
              "name a checkpoint file");
  EXPECT_EXIT(parse_and_exit({"--save_steps", "5"}, ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER | ARGS_REDUCER),
              ::testing::ExitedWithCode(2), "--save_steps is not available in this step");
  EXPECT_EXIT(parse_and_exit({"--save_steps", "-1"}), ::testing::ExitedWithCode(2),
              "--save_steps must be >= 0 \\(got -1\\)");
  Argv w({"--backend", "nccl", "--drop_last"});
  Args b;
  parse(&b, w, ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER);
  EXPECT_STREQ(b.backend, "nccl");
  EXPECT_TRUE(b.drop_last);
}

TEST(Args, Errors) {
  auto code2 = ::testing::ExitedWithCode(2);
  EXPECT_EXIT(parse_and_exit({"--foo"}), code2, "error: unknown flag --foo");
  EXPECT_EXIT(parse_and_exit({"--foo=3"}), code2, "error: unknown flag --foo\n");
  EXPECT_EXIT(parse_and_exit({"-x"}), code2, "error: unknown flag -x");
  EXPECT_EXIT(parse_and_exit({"--batch_size", "abc"}), code2, "error: --batch_size: 'abc' is not an integer");
  EXPECT_EXIT(parse_and_exit({"--batch_size=12x"}), code2, "'12x' is not an integer");
  EXPECT_EXIT(parse_and_exit({"--batch_size", " 12"}), code2, "' 12' is not an integer");
  EXPECT_EXIT(parse_and_exit({"--batch_size", "99999999999"}), code2, "out of range");
  EXPECT_EXIT(parse_and_exit({"--lr", "fast"}), code2, "--lr: 'fast' is not a number");
  EXPECT_EXIT(parse_and_exit({"--lr", "nan"}), code2, "--lr: 'nan' is not a finite number");
  EXPECT_EXIT(parse_and_exit({"--lr", "inf"}), code2, "not a finite number");
  EXPECT_EXIT(parse_and_exit({"--lr", "1e99"}), code2, "not a finite number|out of range");
  EXPECT_EXIT(parse_and_exit({"--seed", "-1"}), code2, "--seed: '-1' is not a non-negative integer");
  EXPECT_EXIT(parse_and_exit({"--seed", "99999999999999999999999"}), code2, "does not fit");
  EXPECT_EXIT(parse_and_exit({"--batch_size", "0"}), code2, "--batch_size must be >= 1 \\(got 0\\)");
  EXPECT_EXIT(parse_and_exit({"--batch_size", "-5"}), code2, "--batch_size must be >= 1");
  EXPECT_EXIT(parse_and_exit({"--epochs", "0"}), code2, "--epochs must be >= 1");
  EXPECT_EXIT(parse_and_exit({"--dataset_size", "-1"}), code2, "--dataset_size must be >= 0");
  EXPECT_EXIT(parse_and_exit({"--save_interval", "-1"}), code2, "--save_interval must be >= 0");
  EXPECT_EXIT(parse_and_exit({"--max_steps", "-1"}), code2, "--max_steps must be >= 0");
  EXPECT_EXIT(parse_and_exit({"--log_interval", "0"}), code2, "--log_interval must be >= 1");
  EXPECT_EXIT(parse_and_exit({"--grad_accum", "0"}), code2, "--grad_accum must be >= 1");
  EXPECT_EXIT(parse_and_exit({"--lr", "0"}), code2, "--lr must be > 0");
  EXPECT_EXIT(parse_and_exit({"--lr", "-0.1"}), code2, "--lr must be > 0");
  EXPECT_EXIT(parse_and_exit({"--bucket_cap_mb", "0"}), code2, "--bucket_cap_mb must be > 0");
  EXPECT_EXIT(parse_and_exit({"--weight_decay", "-1"}), code2, "--weight_decay must be >= 0");
  EXPECT_EXIT(parse_and_exit({"--momentum", "1"}), code2, "--momentum must be in \\[0, 1\\)");
  EXPECT_EXIT(parse_and_exit({"--momentum", "-0.5"}), code2, "--momentum must be in");
  EXPECT_EXIT(parse_and_exit({"--device", "gpu"}), code2, "--device: 'gpu' is not one of auto\\|cpu\\|cuda");
  EXPECT_EXIT(parse_and_exit({"--data", "cifar"}), code2, "--data: 'cifar' is not one of");
  EXPECT_EXIT(parse_and_exit({"--backend=tcp"}), code2,
              "--backend: 'tcp' is not one of auto\\|nccl\\|mpi\\|gloo");
  for (const char *bad : {"12,x", "0", "8,", ",8", "8,,8", "00", "-3", "3.5", " 3", "3 ", "1e3"})
    EXPECT_EXIT(parse_and_exit({"--hidden", bad}), code2,
                std::string("--hidden: '") + bad +
                    "' is not a comma-separated list of positive integers \\(e.g. 1024,1024\\)")
        << bad;
  EXPECT_EXIT(parse_and_exit({"--epochs"}), code2, "error: --epochs needs a value");
  EXPECT_EXIT(parse_and_exit({"--metrics", "--epochs", "2"}), code2, "--metrics needs a value");
  EXPECT_EXIT(parse_and_exit({"--metrics="}), code2, "--metrics needs a non-empty value");
  EXPECT_EXIT(parse_and_exit({"--drop_last=1"}), code2, "--drop_last takes no value");
  EXPECT_EXIT(parse_and_exit({"train.bin"}), code2, "error: unexpected argument 'train.bin'");
  EXPECT_EXIT(parse_and_exit({"--epochs", "2", "3"}), code2, "unexpected argument '3'");
}

TEST(Args, ErrorIsFollowedByBlankLineAndUsage) {
  EXPECT_EXIT(parse_and_exit({"--foo"}, ARGS_TRAIN), ::testing::ExitedWithCode(2),
              "error: unknown flag --foo\n\ntest\n\nusage: prog .*--epochs N.*\\(default 3\\)");
}

// Runs `--help` for @p groups in a child whose stdout goes to a file, and returns that file's text.
std::string help_text(unsigned groups, const std::string &name, const char *flag = "--help") {
  std::string path = std::string(DDP_TEST_TMPDIR) + "/" + name;
  EXPECT_EXIT(
      {
        if (!std::freopen(path.c_str(), "w", stdout)) std::exit(101);
        parse_and_exit({"--epochs", "2", flag}, groups);
      },
      ::testing::ExitedWithCode(0), "");
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Args, HelpExitsZeroAndListsOnlyAcceptedFlags) {
  EXPECT_NE(help_text(kAll, "help_h.txt", "-h").find("usage: prog"), std::string::npos);

  std::string step01 = help_text(ARGS_TRAIN, "help01.txt");
  EXPECT_EQ(step01.rfind("test\n\nusage: prog", 0), 0u) << step01;
  EXPECT_NE(step01.find("--batch_size N"), std::string::npos) << step01;
  EXPECT_NE(step01.find("(default 128)"), std::string::npos) << step01;
  EXPECT_NE(step01.find("(default 0.05)"), std::string::npos) << step01;
  EXPECT_NE(step01.find("--device auto|cpu|cuda"), std::string::npos) << step01;
  EXPECT_NE(step01.find("(default 1024,1024)"), std::string::npos) << step01;
  EXPECT_NE(step01.find("--help"), std::string::npos) << step01;
  EXPECT_EQ(step01.find("--backend"), std::string::npos) << step01;
  EXPECT_EQ(step01.find("--drop_last"), std::string::npos) << step01;
  EXPECT_EQ(step01.find("--bucket_cap_mb"), std::string::npos) << step01;

  std::string step06 = help_text(kAll, "help06.txt");
  for (const char *f : {"--backend auto|nccl|mpi|gloo", "--drop_last", "--bucket_cap_mb X", "--grad_accum N",
                        "--trace PATH", "(default 25)"})
    EXPECT_NE(step06.find(f), std::string::npos) << f << "\n" << step06;
}

// Every number has an upper bound that keeps what the trainers compute from it inside an int (a
// wrapped --batch_size x --grad_accum ended a run with SIGFPE; --bucket_cap_mb 1e30 became a
// 1-byte cap).
TEST(Args, UpperBounds) {
  auto code2 = ::testing::ExitedWithCode(2);
  EXPECT_EXIT(parse_and_exit({"--epochs", "1000001"}), code2,
              "--epochs must be <= 1000000 \\(got 1000001\\)");
  EXPECT_EXIT(parse_and_exit({"--batch_size", "1048577"}), code2, "--batch_size must be <= 1048576");
  EXPECT_EXIT(parse_and_exit({"--grad_accum", "65537"}), code2, "--grad_accum must be <= 65536");
  EXPECT_EXIT(parse_and_exit({"--dataset_size", "100000001"}), code2, "--dataset_size must be <= 100000000");
  EXPECT_EXIT(parse_and_exit({"--save_interval", "1000001"}), code2, "--save_interval must be <= 1000000");
  EXPECT_EXIT(parse_and_exit({"--max_steps", "1000000001"}), code2, "--max_steps must be <= 1000000000");
  EXPECT_EXIT(parse_and_exit({"--log_interval", "2000000000"}), code2,
              "--log_interval must be <= 1000000000");
  EXPECT_EXIT(parse_and_exit({"--bucket_cap_mb", "1e30"}), code2,
              "--bucket_cap_mb must be <= 1024 \\(got 1e30\\)");
  EXPECT_EXIT(parse_and_exit({"--bucket_cap_mb", "1024.5"}), code2, "--bucket_cap_mb must be <= 1024");
  EXPECT_EXIT(parse_and_exit({"--timeout", "1e30"}), code2, "--timeout must be <= 604800");
  // The product, whichever flag comes last.
  EXPECT_EXIT(parse_and_exit({"--batch_size", "1048576", "--grad_accum", "32"}), code2,
              "--batch_size 1048576 x --grad_accum 32 = 33554432 samples per optimizer step, more "
              "than 16777216");
  EXPECT_EXIT(parse_and_exit({"--grad_accum", "65536", "--batch_size", "65536"}), code2,
              "x --grad_accum 65536 = 4294967296 samples per optimizer step");
  // The bounds themselves are accepted.
  Argv v({"--epochs", "1000000", "--batch_size", "1048576", "--grad_accum", "16", "--bucket_cap_mb", "1024",
          "--timeout", "604800", "--max_steps", "1000000000", "--dataset_size", "100000000", "--hidden",
          "1048576,1048576,1048576,1048576,1048576,1048576,1048576"});
  Args a;
  parse(&a, v);
  EXPECT_EQ(a.batch_size, 1048576);
  EXPECT_EQ(a.grad_accum, 16);
  EXPECT_EQ(a.bucket_cap_mb, 1024.0f);
}

// --hidden's bounds are the model's: the parser checks only the form, mlp_parse_sizes the count and
// the widths (the steps end with exit 2 and its bounds when it refuses), and --help states them.
TEST(Args, HiddenBoundsAreTheModels) {
  for (std::string big : {"64," + std::to_string(MLP_MAX_WIDTH + 1), std::string("99999999999999999999"),
                          std::string("1,2,3,4,5,6,7,8")}) {
    Argv v({"--hidden", big});
    Args a;
    parse(&a, v);
    int sizes[MLP_MAX_LAYERS + 1];
    EXPECT_EQ(mlp_parse_sizes(a.hidden, 784, 10, sizes), -1) << big;
  }
  int sizes[MLP_MAX_LAYERS + 1];
  EXPECT_EQ(mlp_parse_sizes(std::to_string(MLP_MAX_WIDTH).c_str(), 784, 10, sizes), 2);
  EXPECT_EQ(mlp_parse_sizes("1,2,3,4,5,6,7", 784, 10, sizes), MLP_MAX_LAYERS);
  std::string help = help_text(ARGS_TRAIN, "help_hidden.txt");
  std::string bounds =
      "at most " + std::to_string(MLP_MAX_LAYERS - 1) + " sizes, each 1.." + std::to_string(MLP_MAX_WIDTH);
  EXPECT_NE(help.find(bounds), std::string::npos) << bounds << "\n" << help;
}

TEST(Args, HelpStatesEveryLimit) {
  std::string step06 = help_text(kAll, "help_limits.txt");
  for (const char *f :
       {"--epochs N                             passes over the training data; 1..1000000",
        "per process; 1..1048576 (default 128)", "learning rate; > 0", "SGD momentum; in [0, 1)",
        "0 = all (synthetic: 10000); 0..100000000", "0 = never; 0..1000000",
        "at most 7 sizes, each 1..1048576", "0 = no limit; 0..1000000000", "progress lines; 1..1000000000",
        "in (0, 604800] (default 300)", "cap in MiB; in (0, 1024] (default 25)",
        "micro-batches per optimizer step; 1..65536", "{rank} required above 1 rank",
        "limits: --batch_size x --grad_accum <= 16777216"})
    EXPECT_NE(step06.find(f), std::string::npos) << f << "\n" << step06;
}

// One path for the metrics and the trace would leave only the trace: refused, naming the path; two
// paths are fine.
TEST(Args, MetricsAndTraceNeedTheirOwnPaths) {
  EXPECT_EXIT(parse_and_exit({"--metrics", "m{rank}.json", "--trace", "m{rank}.json"}),
              ::testing::ExitedWithCode(2), "--metrics and --trace are both 'm\\{rank\\}.json'");
  Argv v({"--metrics", "m{rank}.jsonl", "--trace", "t{rank}.json"});
  Args a;
  parse(&a, v);
  EXPECT_STREQ(a.metrics, "m{rank}.jsonl");
  EXPECT_STREQ(a.trace, "t{rank}.json");
}

// PowerSGD's settings under another hook (or none) would change nothing: refused, naming the flag.
TEST(Args, PowerSgdSettingsNeedThePowerSgdHook) {
  const unsigned hooks = kAll | ARGS_HOOKS;
  EXPECT_EXIT(parse_and_exit({"--powersgd_rank", "2"}, hooks), ::testing::ExitedWithCode(2),
              "--powersgd_rank applies to --comm_hook powersgd only \\(this run's hook is allreduce\\)");
  EXPECT_EXIT(parse_and_exit({"--comm_hook", "fp16", "--powersgd_start_iter", "5"}, hooks),
              ::testing::ExitedWithCode(2),
              "--powersgd_start_iter applies to --comm_hook powersgd only \\(this run's hook is fp16\\)");
  Argv v({"--powersgd_start_iter", "5", "--powersgd_rank", "2", "--comm_hook", "powersgd"});
  Args a;
  parse(&a, v, hooks);
  EXPECT_EQ(a.powersgd_rank, 2);
  EXPECT_EQ(a.powersgd_start_iter, 5);
}

// --fr_dir: the flight recorder's rings go beside the metrics unless told otherwise; a metrics folder
// that depends on the rank (one folder per rank) would scatter them, so then they go to out/.
TEST(Args, FlightRecorderFolderDefaultsBesideTheMetrics) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "out"},
      {{"--metrics", "m{rank}.jsonl"}, "."},
      {{"--metrics", "runs/a/m{rank}.jsonl"}, "runs/a"},
      {{"--metrics", "/m.jsonl"}, "/"},
      {{"--metrics", "runs/{rank}/m.jsonl"}, "out"},
      {{"--metrics", "runs/a/m{rank}.jsonl", "--fr_dir", "hangs"}, "hangs"},
  };
  for (const auto &c : cases) {
    Argv v({});
    v.s.insert(v.s.end(), c.first.begin(), c.first.end());
    v.p.clear();
    for (auto &x : v.s) v.p.push_back(x.data());
    v.p.push_back(nullptr);
    Args a;
    parse(&a, v);
    EXPECT_STREQ(a.fr_dir, c.second.c_str()) << (c.first.empty() ? "(no flags)" : c.first[1]);
  }
}
