#include "conduit/window.h"

#include <gtest/gtest.h>

namespace conduit {
namespace {

TEST(Window, AcquiresUpToLimitThenRefuses) {
  Window w(3);
  EXPECT_EQ(w.limit(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(w.has_room()) << "slot " << i;
    EXPECT_TRUE(w.try_acquire()) << "slot " << i;
  }
  EXPECT_EQ(w.in_flight(), 3u);
  EXPECT_FALSE(w.has_room());
  EXPECT_FALSE(w.try_acquire());
  // A refused acquire must not count as in flight.
  EXPECT_EQ(w.in_flight(), 3u);
}

TEST(Window, ReleaseMakesRoomForExactlyOne) {
  Window w(2);
  ASSERT_TRUE(w.try_acquire());
  ASSERT_TRUE(w.try_acquire());
  w.release();
  EXPECT_EQ(w.in_flight(), 1u);
  EXPECT_TRUE(w.has_room());
  EXPECT_TRUE(w.try_acquire());
  EXPECT_FALSE(w.try_acquire());
}

TEST(Window, DrainsToEmpty) {
  Window w(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(w.try_acquire());
  for (int i = 0; i < 4; ++i) w.release();
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_TRUE(w.has_room());
}

// A provider that reports one completion twice calls release() once too often; with an unsigned counter
// that wraps to 2^32-1 and the window would never have room again, or, clamped wrongly, admit more than
// `limit` slices afterwards.
TEST(Window, ExtraReleaseNeitherUnderflowsNorGrowsTheWindow) {
  Window w(2);
  w.release();
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_TRUE(w.has_room());

  ASSERT_TRUE(w.try_acquire());
  w.release();
  w.release();
  w.release();
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_TRUE(w.try_acquire());
  EXPECT_TRUE(w.try_acquire());
  EXPECT_FALSE(w.try_acquire()) << "window admitted more than its limit after extra releases";
  EXPECT_EQ(w.in_flight(), 2u);
}

// A window of 0 would never admit a slice and the batch would stall forever.
TEST(Window, LimitZeroIsTreatedAsOne) {
  Window w(0);
  EXPECT_EQ(w.limit(), 1u);
  EXPECT_TRUE(w.has_room());
  EXPECT_TRUE(w.try_acquire());
  EXPECT_FALSE(w.try_acquire());
  w.release();
  EXPECT_TRUE(w.try_acquire());
}

TEST(Window, LimitOneAlternates) {
  Window w(1);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(w.try_acquire()) << "round " << i;
    ASSERT_FALSE(w.try_acquire()) << "round " << i;
    w.release();
  }
  EXPECT_EQ(w.in_flight(), 0u);
}

}  // namespace
}  // namespace conduit
