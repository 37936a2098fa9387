// Where the ranks run (placement.h): the one line rank 0 prints.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "placement.h"

namespace {

Placement at(const char *host, int local) {
  Placement p{};
  std::strncpy(p.host, host, sizeof p.host - 1);
  p.local_rank = local;
  return p;
}

std::string line(const std::vector<Placement> &all, size_t size = PLACEMENT_LINE) {
  std::vector<char> out(size);
  placement_format(out.data(), out.size(), all.data(), (int)all.size());
  return out.data();
}

TEST(Placement, TwoNodesTwoRanksEach) {
  EXPECT_EQ(line({at("nodea", 0), at("nodea", 1), at("nodeb", 0), at("nodeb", 1)}),
            "ranks: nodea 0-1 (local 0-1), nodeb 2-3 (local 0-1)");
}

TEST(Placement, OneNode) { EXPECT_EQ(line({at("vm", 0), at("vm", 1)}), "ranks: vm 0-1 (local 0-1)"); }

TEST(Placement, SingleRankGroupsAndRoundRobin) {
  EXPECT_EQ(line({at("a", 0), at("b", 0), at("a", 1)}), "ranks: a 0 (local 0), b 1 (local 0), a 2 (local 1)");
}

TEST(Placement, LocalRanksOutOfOrder) {
  EXPECT_EQ(line({at("n", 1), at("n", 0), at("n", 2), at("n", 3)}), "ranks: n 0-3 (local 1,0,2-3)");
}

TEST(Placement, ManyRanksStayOneLineAndEndWithDots) {
  std::vector<Placement> all;
  for (int r = 0; r < 256; r++) all.push_back(at(("node" + std::to_string(r)).c_str(), 0));
  std::string s = line(all, 64);
  EXPECT_EQ(s.size(), 63u);
  EXPECT_EQ(s.substr(s.size() - 3), "...");
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s.rfind("ranks: node0 0 (local 0), node1 1", 0), 0u);
}

TEST(Placement, SelfCutsALongHostName) {
  Placement p;
  placement_self(&p, 3);
  EXPECT_EQ(p.local_rank, 3);
  EXPECT_GT(std::strlen(p.host), 0u);
  EXPECT_LT(std::strlen(p.host), sizeof p.host);
}

}  // namespace
