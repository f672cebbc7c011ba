// The text helpers every reader of flags, environment variables, config files and one-line files uses
// (conduit/common/text.h): what counts as a blank, an entry of a list and a number.
#include "conduit/common/text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace conduit {
namespace {

using Views = std::vector<std::string_view>;
using Strings = std::vector<std::string>;

TEST(Text, TrimDropsAsciiBlanksAtBothEndsOnly) {
  EXPECT_EQ(trim("  mlx5_0\t"), "mlx5_0");
  EXPECT_EQ(trim("token\r\n"), "token");
  EXPECT_EQ(trim("\v\f 8GiB \f\v"), "8GiB");
  EXPECT_EQ(trim("a b"), "a b");
  EXPECT_EQ(trim(" a b "), "a b");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t\r\n"), "");
}

TEST(Text, SplitKeepsEveryPieceAsItIs) {
  EXPECT_EQ(split("a,b", ','), (Views{"a", "b"}));
  EXPECT_EQ(split("a,,b,", ','), (Views{"a", "", "b", ""}));
  EXPECT_EQ(split(" a , b ", ','), (Views{" a ", " b "}));
  EXPECT_EQ(split("", ','), (Views{""}));
  EXPECT_EQ(split(",", ','), (Views{"", ""}));
  EXPECT_EQ(split("default/job", '/'), (Views{"default", "job"}));
}

TEST(Text, SplitListReadsNamesAsOperatorsWriteThem) {
  EXPECT_EQ(split_list("mlx5_0,mlx5_1"), (Strings{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(split_list("mlx5_0, mlx5_3,"), (Strings{"mlx5_0", "mlx5_3"}));
  EXPECT_EQ(split_list(" ,a,, b ,"), (Strings{"a", "b"}));
  EXPECT_EQ(split_list(""), Strings{});
  EXPECT_EQ(split_list(" , "), Strings{});
}

TEST(Text, JoinPutsTheSeparatorBetweenItemsOnly) {
  EXPECT_EQ(join(Strings{"eth0", "eth1"}, ", "), "eth0, eth1");
  EXPECT_EQ(join(Strings{"tcp"}, ","), "tcp");
  EXPECT_EQ(join(Strings{}, ", "), "");
}

TEST(Text, ToLowerChangesAsciiLettersOnly) {
  EXPECT_EQ(to_lower("0000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(to_lower("TRUE"), "true");
  EXPECT_EQ(to_lower("caf\xc3\x89"), "caf\xc3\x89");  // a UTF-8 byte is not an ASCII letter
  EXPECT_EQ(to_lower(""), "");
}

TEST(Text, ParseIntegerTakesTheWholeTextOrNothing) {
  EXPECT_EQ(parse_integer<int>("42"), 42);
  EXPECT_EQ(parse_integer<int>("-1"), -1);
  EXPECT_EQ(parse_integer<std::uint64_t>("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", " 42", "42 ", "+42", "4 2", "42x", "0x10", "one"}) {
    EXPECT_EQ(parse_integer<int>(bad), std::nullopt) << '"' << bad << '"';
  }
  EXPECT_EQ(parse_integer<std::uint64_t>("-1"), std::nullopt);  // no sign for an unsigned type
  EXPECT_EQ(parse_integer<std::uint64_t>("-0"), std::nullopt);
  EXPECT_EQ(parse_integer<std::uint64_t>("18446744073709551616"), std::nullopt);  // overflows
  EXPECT_EQ(parse_integer<int>("2147483648"), std::nullopt);
}

TEST(Text, ParseIntegerInARangeRefusesWhatLiesOutside) {
  EXPECT_EQ(parse_integer<long>("1", 1, 255), 1);
  EXPECT_EQ(parse_integer<long>("255", 1, 255), 255);
  EXPECT_EQ(parse_integer<long>("-1", -1, 255), -1);
  EXPECT_EQ(parse_integer<long>("0", 1, 255), std::nullopt);
  EXPECT_EQ(parse_integer<long>("256", 1, 255), std::nullopt);
  EXPECT_EQ(parse_integer<long>("", 0, 255), std::nullopt);
  EXPECT_EQ(parse_integer<std::uint64_t>("65536", 0, 65535), std::nullopt);
  EXPECT_EQ(parse_integer<std::uint64_t>("99999999999999999999", 0, 65535), std::nullopt);
}

}  // namespace
}  // namespace conduit
