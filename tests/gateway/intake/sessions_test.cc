#include "gateway/intake/sessions.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

// A lookup's source, model and turns, to compare in one expectation.
std::tuple<std::string, std::string, int64_t> State(const SessionLookup& l) {
  return {l.source, l.model, l.turns};
}
std::tuple<std::string, std::string, int64_t> State(const char* source, const char* model,
                                                    int turns) {
  return {source, model, turns};
}

constexpr int64_t kNow = 1'800'000'000;

TEST(SessionTokenTest, ATokenHoldsOnlyForItsSessionItsKeyAndItsLifetime) {
  const SessionToken token(std::string(32, 'k'));
  const std::string t = token.Sign("chat-1", {"qwen", 3, kNow + 60});
  auto claims = token.Verify("chat-1", t, kNow);
  ASSERT_TRUE(claims.has_value());
  EXPECT_EQ(claims->model, "qwen");
  EXPECT_EQ(claims->turn, 3);
  // Another session, another key, past its expiry: refused.
  EXPECT_FALSE(token.Verify("chat-2", t, kNow).has_value());
  EXPECT_FALSE(SessionToken(std::string(32, 'x')).Verify("chat-1", t, kNow).has_value());
  EXPECT_FALSE(token.Verify("chat-1", t, kNow + 60).has_value());
  // Another replica with the same key honours it.
  EXPECT_TRUE(SessionToken(std::string(32, 'k')).Verify("chat-1", t, kNow).has_value());
}

TEST(SessionTokenTest, EveryAlteredOrMalformedTokenIsRefused) {
  const SessionToken token(std::string(32, 'k'));
  const std::string t = token.Sign("s", {"nemo.tron", 2, kNow + 60});
  ASSERT_TRUE(token.Verify("s", t, kNow).has_value()) << "a model name may hold dots";
  // Change any one byte: the MAC no longer matches, or the token no longer parses.
  for (size_t i = 0; i < t.size(); ++i) {
    std::string bad = t;
    bad[i] = bad[i] == '1' ? '2' : '1';
    EXPECT_FALSE(token.Verify("s", bad, kNow).has_value()) << bad;
  }
  const std::vector<std::string> malformed = {"",
                                              ".",
                                              "1....",
                                              "1.qwen.2.99999999999.",
                                              "2.qwen.1.9.abcd",
                                              "1.qwen.0." + std::to_string(kNow + 60) + ".00",
                                              std::string(SessionToken::kMaxTokenBytes + 1, 'a')};
  for (const std::string& bad : malformed) {
    EXPECT_FALSE(token.Verify("s", bad, kNow).has_value()) << bad;
  }
}

std::chrono::steady_clock::time_point fake_now;
std::chrono::steady_clock::time_point FakeClock() { return fake_now; }

SessionOptions Options(int64_t max_sessions) {
  SessionOptions o;
  o.ttl = std::chrono::seconds(60);
  o.max_sessions = max_sessions;
  o.clock = &FakeClock;
  return o;
}

TEST(SessionsTest, TheTableRemembersTheLastModelAndCountsTurnsAndSwitches) {
  Sessions sessions(Options(10), SessionToken(std::string(32, 'k')));
  SessionLookup before = sessions.Lookup("a", "");
  EXPECT_STREQ(before.source, "new");
  EXPECT_EQ(before.model, "");
  tandem::v1::SessionInfo info;
  sessions.Record("a", before, "nemotron", &info);
  EXPECT_EQ(info.turn(), 1);
  EXPECT_FALSE(info.switched());
  EXPECT_FALSE(info.token().empty());

  before = sessions.Lookup("a", "");
  EXPECT_EQ(State(before), State("table", "nemotron", 1));
  sessions.Record("a", before, "qwen", &info);
  EXPECT_EQ(info.turn(), 2);
  EXPECT_TRUE(info.switched());
  // The token wins over the table: it is the caller's latest answer.
  before = sessions.Lookup("a", info.token());
  EXPECT_EQ(State(before), State("token", "qwen", 2));
}

TEST(SessionsTest, AReplayedOlderTokenCannotRewindWhatTheTableKnows) {
  Sessions sessions(Options(10), SessionToken(std::string(32, 'k')));
  tandem::v1::SessionInfo info;
  sessions.Record("a", sessions.Lookup("a", ""), "nemotron", &info);
  const std::string turn1 = info.token();
  sessions.Record("a", sessions.Lookup("a", turn1), "qwen", &info);
  sessions.Record("a", sessions.Lookup("a", info.token()), "qwen", &info);
  ASSERT_EQ(info.turn(), 3);

  // Turn 1's token again: the table has served three turns since, so its state stands.
  SessionLookup before = sessions.Lookup("a", turn1);
  EXPECT_EQ(State(before), State("table", "qwen", 3));
  sessions.Record("a", before, "qwen", &info);
  EXPECT_EQ(info.turn(), 4);
  EXPECT_FALSE(info.switched());
  // Even with the lookup made from the old token alone, the reply counts what the table knows,
  // and the new token carries that count.
  sessions.Record("a", SessionLookup{"nemotron", 1, "token"}, "qwen", &info);
  EXPECT_EQ(info.turn(), 5);
  before = sessions.Lookup("a", info.token());
  EXPECT_EQ(before.turns, 5);
  EXPECT_STREQ(before.source, "token") << "a token that ties with the table wins";

  // A token ahead of the table (another replica served turns) still wins.
  Sessions other(Options(10), SessionToken(std::string(32, 'k')));
  before = other.Lookup("a", info.token());
  EXPECT_STREQ(before.source, "token");
  EXPECT_EQ(before.turns, 5);
  other.Record("a", before, "nemotron", &info);
  EXPECT_EQ(info.turn(), 6);
  before = sessions.Lookup("a", info.token());
  EXPECT_EQ(State(before), State("token", "nemotron", 6));
  sessions.Record("a", before, "nemotron", &info);
  EXPECT_EQ(info.turn(), 7);
  before = other.Lookup("a", info.token());  // other's table says 6, the token 7
  EXPECT_STREQ(before.source, "token");
  EXPECT_EQ(before.turns, 7);
}

TEST(SessionsTest, IdleSessionsExpireAndTheTableNeverExceedsItsBound) {
  Sessions sessions(Options(3), SessionToken(std::string(32, 'k')));
  tandem::v1::SessionInfo info;
  for (int i = 0; i < 10; ++i) {
    const std::string id = "s" + std::to_string(i);
    sessions.Record(id, sessions.Lookup(id, ""), "qwen", &info);
    EXPECT_LE(sessions.size(), 3u);
  }
  // The least recently used went first.
  EXPECT_STREQ(sessions.Lookup("s0", "").source, "new");
  EXPECT_STREQ(sessions.Lookup("s9", "").source, "table");
  sessions.Record("s9", sessions.Lookup("s9", ""), "qwen", &info);
  EXPECT_EQ(info.turn(), 2);
  fake_now += std::chrono::seconds(61);
  EXPECT_STREQ(sessions.Lookup("s9", "").source, "new");
  // A forgotten session starts over, in the table as in its token.
  sessions.Record("s9", sessions.Lookup("s9", ""), "qwen", &info);
  EXPECT_EQ(info.turn(), 1);
  EXPECT_EQ(sessions.Lookup("s9", "").turns, 1);
  fake_now += std::chrono::seconds(61);
  sessions.Record("fresh", sessions.Lookup("fresh", ""), "qwen", &info);
  EXPECT_EQ(sessions.size(), 1u) << "expired sessions are dropped as new ones arrive";
  // Without a table, tokens alone keep a session.
  Sessions tokens_only(Options(0), SessionToken(std::string(32, 'k')));
  tokens_only.Record("t", tokens_only.Lookup("t", ""), "nemotron", &info);
  EXPECT_EQ(tokens_only.size(), 0u);
  EXPECT_EQ(tokens_only.Lookup("t", info.token()).model, "nemotron");
}

}  // namespace
}  // namespace tandem::gateway
