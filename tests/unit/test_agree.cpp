// Ranks must agree (agree.h): the comparison that decides, and the message it prints.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "agree.h"
#include "args.h"
#include "data.h"
#include "test_files.h"

namespace {

Args defaults() {
  Args a{};
  a.epochs = 3;
  a.batch_size = 128;
  a.lr = 0.05f;
  a.momentum = 0.9f;
  a.data = "synthetic";
  a.hidden = "64";
  a.seed = 42;
  a.device = "cpu";
  a.bucket_cap_mb = 25.0f;
  a.grad_accum = 1;
  return a;
}

Agreement list(const Args &args, int hidden = 64) {
  Agreement a;
  agree_init(&a);
  agree_args(&a, args_settings(&args));
  int sizes[3] = {784, hidden, 10};
  agree_model(&a, sizes, 2);
  DataId id{2, 2048, 2000, 784, 10, 0x1234u, 0};
  agree_data(&a, &id);
  return a;
}

std::string compare(const std::vector<Agreement> &all) {
  char msg[1024];
  int differ = agree_compare(msg, sizeof msg, all.data(), (int)all.size());
  EXPECT_EQ(differ != 0, msg[0] != '\0');
  return msg;
}

}  // namespace

TEST(Agree, IdenticalRanksAgree) {
  Args a = defaults();
  EXPECT_EQ(compare({list(a), list(a), list(a), list(a)}), "");
}

// Every flag that changes training is compared: change each on one rank, and the message names it.
TEST(Agree, EachTrainingFlagIsCompared) {
  struct Case {
    const char *flag;
    void (*change)(Args *);
  } cases[] = {
      {"--epochs", [](Args *a) { a->epochs = 4; }},
      {"--batch_size", [](Args *a) { a->batch_size = 64; }},
      {"--lr", [](Args *a) { a->lr = 0.1f; }},
      {"--momentum", [](Args *a) { a->momentum = 0.5f; }},
      {"--weight_decay", [](Args *a) { a->weight_decay = 1e-4f; }},
      {"--dataset_size", [](Args *a) { a->dataset_size = 100; }},
      {"--data", [](Args *a) { a->data = "mnist"; }},
      {"--seed", [](Args *a) { a->seed = 7; }},
      {"--max_steps", [](Args *a) { a->max_steps = 10; }},
      {"--save_interval", [](Args *a) { a->save_interval = 2; }},
      {"--device", [](Args *a) { a->device = "cuda"; }},
      {"--tf32", [](Args *a) { a->tf32 = true; }},
      {"--drop_last", [](Args *a) { a->drop_last = true; }},
      {"--bucket_cap_mb", [](Args *a) { a->bucket_cap_mb = 1.0f; }},
      {"--grad_accum", [](Args *a) { a->grad_accum = 2; }},
      {"--trace", [](Args *a) { a->trace = "t.json"; }},
      {"--save_init", [](Args *a) { a->save_init = "init"; }},
      {"--save_steps", [](Args *a) { a->save_steps = 5; }},
      {"--resume auto", [](Args *a) { a->resume = ARGS_RESUME_AUTO; }},
  };
  for (const Case &c : cases) {
    Args a = defaults(), b = defaults();
    c.change(&b);
    std::string msg = compare({list(a), list(b)});
    EXPECT_EQ(msg.rfind(std::string("the ranks disagree on ") + c.flag + " (rank 0: ", 0), 0u) << msg;
  }
}

// Output-only flags may differ per rank (each rank writes its own files).
TEST(Agree, OutputFlagsMayDiffer) {
  Args a = defaults(), b = defaults();
  b.metrics = "m{rank}.jsonl";
  b.ckpt_dir = "elsewhere";
  b.log_interval = 7;
  b.timeout = 10.0f;
  b.data_dir = "/other/copy/of/the/same/data";
  EXPECT_EQ(compare({list(a), list(b)}), "");
}

// "--hidden 11" and "--hidden 11,5" could even have similar parameter counts: the shapes differ.
TEST(Agree, ModelShapeIsCompared) {
  Args a = defaults();
  Agreement x = list(a), y = list(a);
  Agreement z;
  agree_init(&z);
  agree_args(&z, args_settings(&a));
  int sizes[4] = {784, 11, 5, 10};
  agree_model(&z, sizes, 3);
  DataId id{2, 2048, 2000, 784, 10, 0x1234u, 0};
  agree_data(&z, &id);
  std::string msg = compare({x, y, z});
  EXPECT_NE(msg.find("the ranks disagree on the model (ranks 0, 1: 784-64-10; rank 2: 784-11-5-10)"),
            std::string::npos)
      << msg;
}

TEST(Agree, DataIsCompared) {
  Args a = defaults();
  Agreement x = list(a), y;
  agree_init(&y);
  agree_args(&y, args_settings(&a));
  int sizes[3] = {784, 64, 10};
  agree_model(&y, sizes, 2);
  DataId other{2, 2048, 2000, 784, 10, 0x9999u, 0};  // same sizes, other labels
  agree_data(&y, &other);
  std::string msg = compare({x, y});
  EXPECT_NE(msg.find("the ranks disagree on the data"), std::string::npos) << msg;
  EXPECT_NE(msg.find("labels crc 00009999"), std::string::npos) << msg;
}

// Same sizes and labels, other pixels (image files that differ only in their images): refused, and
// the message shows both pixel CRCs.
TEST(Agree, PixelsAreCompared) {
  Args a = defaults();
  Agreement x = list(a), y;
  agree_init(&y);
  agree_args(&y, args_settings(&a));
  int sizes[3] = {784, 64, 10};
  agree_model(&y, sizes, 2);
  DataId other{2, 2048, 2000, 784, 10, 0x1234u, 0x77u};
  agree_data(&y, &other);
  std::string msg = compare({x, y});
  EXPECT_NE(msg.find("the ranks disagree on the data (rank 0: synthetic: 2048 train / 2000 test samples of "
                     "784 features, 10 classes, labels crc 00001234, pixels crc 00000000; rank 1: "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("pixels crc 00000077)"), std::string::npos) << msg;
}

// The message groups the ranks by value and lists the other settings that differ too.
TEST(Agree, MessageGroupsRanksAndListsTheRest) {
  Args a = defaults(), b = defaults();
  b.momentum = 0.5f;
  b.bucket_cap_mb = 1.0f;
  std::string msg = compare({list(a), list(b), list(a), list(b)});
  EXPECT_NE(msg.find("the ranks disagree on --momentum (ranks 0, 2: 0.9; ranks 1, 3: 0.5); also on "
                     "--bucket_cap_mb"),
            std::string::npos)
      << msg;
}

// A float is shown as typed, unless that would hide a difference.
TEST(Agree, CloseFloatsStayDistinct) {
  Args a = defaults(), b = defaults();
  b.lr = std::nextafter(0.05f, 1.0f);
  std::string msg = compare({list(a), list(b)});
  EXPECT_NE(msg.find("--lr (rank 0: 0.05; rank 1: 0.0500000045)"), std::string::npos) << msg;
}

// Different programs (another step, another build) are named first.
TEST(Agree, ProgramIsCompared) {
  Args a = defaults();
  Agreement x = list(a), y = list(a);
  snprintf(y.value[0], AGREE_VALUE, "06_full (executable crc 00000001)");
  std::string msg = compare({x, y});
  EXPECT_EQ(msg.rfind("the ranks disagree on the program (rank 0: ", 0), 0u) << msg;
  EXPECT_EQ(std::string(x.name[0]), "the program");
}

// A value too long to show whole is cut, but a difference after the cut still counts.
TEST(Agree, LongValuesKeepTheirDifferences) {
  Agreement x, y;
  agree_init(&x);
  agree_init(&y);
  std::string base(400, 'a');
  agree_add(&x, "long", "%s%s", base.c_str(), "x");
  agree_add(&y, "long", "%s%s", base.c_str(), "y");
  EXPECT_LT(std::string(x.value[1]).size(), (size_t)AGREE_VALUE);
  std::string msg = compare({x, y});
  EXPECT_EQ(msg.rfind("the ranks disagree on long", 0), 0u) << msg;
}

// The data set's identity: same data, same id; a label changed, another id.
TEST(Agree, DatasetIdFollowsTheLabels) {
  Dataset train{}, test{};
  dataset_synthetic(&train, 100, 8, 3, 1, 0);
  dataset_synthetic(&test, 20, 8, 3, 1, 1);
  DataId a = dataset_id(DATA_SYNTHETIC, &train, &test);
  DataId b = dataset_id(DATA_SYNTHETIC, &train, &test);
  EXPECT_EQ(a.labels_crc, b.labels_crc);
  EXPECT_EQ(a.n_train, 100u);
  EXPECT_EQ(a.n_test, 20u);
  EXPECT_EQ(a.dim, 8u);
  EXPECT_EQ(a.n_classes, 3u);
  test.y[5] = (test.y[5] + 1) % 3;
  DataId c = dataset_id(DATA_SYNTHETIC, &train, &test);
  EXPECT_NE(a.labels_crc, c.labels_crc);
  char text[160];
  dataset_id_str(text, sizeof text, &a);
  EXPECT_EQ(std::string(text).rfind("synthetic: 100 train / 20 test samples of 8 features, 3 classes", 0), 0u)
      << text;
  dataset_free(&train);
  dataset_free(&test);
}

// Synthetic data: the pixels CRC is that of what was generated, so it follows the seed (the labels,
// which cycle through the classes, do not).
TEST(Agree, DatasetIdFollowsTheGeneratedFeatures) {
  Dataset train{}, test{}, train2{}, test2{};
  dataset_synthetic(&train, 100, 8, 3, 1, 0);
  dataset_synthetic(&test, 20, 8, 3, 1, 1);
  EXPECT_EQ(train.crc, crc32_reference((const unsigned char *)train.x, 100 * 8 * sizeof(float)));
  EXPECT_EQ(test.crc, crc32_reference((const unsigned char *)test.x, 20 * 8 * sizeof(float)));
  dataset_synthetic(&train2, 100, 8, 3, 2, 0);
  dataset_synthetic(&test2, 20, 8, 3, 2, 1);
  DataId a = dataset_id(DATA_SYNTHETIC, &train, &test), b = dataset_id(DATA_SYNTHETIC, &train2, &test2);
  EXPECT_EQ(a.labels_crc, b.labels_crc);
  EXPECT_NE(a.pixels_crc, b.pixels_crc);
  DataId c = dataset_id(DATA_SYNTHETIC, &train, &test2);  // one split other: another id too
  EXPECT_NE(a.pixels_crc, c.pixels_crc);
  dataset_free(&train2);
  dataset_synthetic(&train2, 100, 8, 3, 1, 0);  // the same again: the same id
  EXPECT_EQ(dataset_id(DATA_SYNTHETIC, &train2, &test).pixels_crc, a.pixels_crc);
  for (Dataset *d : {&train, &test, &train2, &test2}) dataset_free(d);
}
