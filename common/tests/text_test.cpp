// Text from untrusted code (common/text.h): what a terminal or a JSON writer would act on is gone,
// what people read stays.
#include <gtest/gtest.h>

#include "atrex/common/text.h"

namespace atrex {
namespace {

TEST(Text, PrintableTextReplacesControlCharactersButKeepsLinesTabsAndUtf8) {
  // The forged row of attack round 3: carriage return, erase line, a fake `ok`, conceal.
  EXPECT_EQ(printable_text("returned 1: \r\x1b[2K   15  ok  1.0000\x1b[8m"),
            "returned 1: ??[2K   15  ok  1.0000?[8m");
  EXPECT_EQ(printable_text("line 1\n\tline 2"), "line 1\n\tline 2");
  EXPECT_EQ(printable_text("bell\x07 del\x7f nul" + std::string(1, '\0')), "bell? del? nul?");
  // C1 controls (U+0080..U+009F; U+009B is a one-character CSI) go, other UTF-8 stays.
  EXPECT_EQ(printable_text("csi\xc2\x9b" "2J \xc2\xa0 \xce\xbc" "s 5\xe2\x80\x93" "6"),
            "csi?2J \xc2\xa0 \xce\xbc" "s 5\xe2\x80\x93" "6");
  // Invalid UTF-8 becomes '?' first (valid_utf8), then the rest as above.
  EXPECT_EQ(printable_text("raw \xff\xfe bytes"), "raw ?? bytes");
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "???") << "a surrogate is not UTF-8";
}

}  // namespace
}  // namespace atrex
