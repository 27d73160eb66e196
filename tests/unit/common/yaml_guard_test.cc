#include "common/yaml_guard.h"

#include <gtest/gtest.h>

#include <string>

namespace ringtrain {
namespace {

// Each of these made yaml-cpp 0.7 allocate without bound (found by the manifest fuzz target).
TEST(YamlGuard, InputsThatHangYamlCppAreRefusedNamingTheLine) {
  for (const std::string text :
       {", b\n", "- a\n, b\n", "- a\n a\n a\n, b\n", " , b\n", "\t, b\n", "\xEF\xBB\xBF, b\n",
        "---\n, b\n", "--- , b\n", "# c\n, b\n", "[a]\n, b\n", "[a] , b\n", "&x , b\n",
        "!!str , b\n", "\"a\" , b\n", "{x: 1} , b\n", "a: 1\n---\n, b\n", "a: 1\n...\n, b\n",
        "a: 1\n--- , b\n"}) {
    Status s = CheckYamlDocumentShape(text, "job.yaml");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.message().rfind("job.yaml: ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find("(line "), std::string::npos) << s.message();
  }
}

// yaml-cpp reads a NUL as the end of the stream and then never returns on a ',' after it; the
// libFuzzer manifest and kubeconfig targets found "\0,\xCD\b:" (5 bytes, past the shape check:
// its one line looked like a key). YAML and JSON allow no control character but tab, LF and CR.
TEST(YamlGuard, ControlCharactersAreRefusedNamingLineAndColumn) {
  Status s = CheckYamlDocumentShape(std::string("\0,\xCD\b:", 5), "job.yaml");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "job.yaml: a control character (0x00) (line 1): column 1; YAML allows only tab, line "
            "feed and carriage return");
  s = CheckYamlDocumentShape("apiVersion: v1\nkind: \x04X\n", "k.yaml");
  EXPECT_NE(s.message().find("(0x04) (line 2): column 7"), std::string::npos) << s.message();
  for (const char c : {'\x01', '\x08', '\x0B', '\x0C', '\x1B', '\x1F', '\x7F'}) {
    EXPECT_FALSE(CheckYamlDocumentShape(std::string("a: x") + c + "\n", "x").ok()) << int{c};
  }
  EXPECT_TRUE(CheckYamlDocumentShape("a:\t1\r\nb: \"\xC3\xA9\"\r\n", "x").ok());
}

// yaml-cpp takes a directive line anywhere as the start of another document; "p:\n%\n," never
// returns (the kubeconfig fuzz target). Directives belong before the first "---" only.
TEST(YamlGuard, ADirectiveInsideTheDocumentIsRefused) {
  for (const std::string text :
       {"p:\n%\n,", "a: 1\n%YAML 1.2\n", "---\n%TAG ! x\na: 1\n", "a: 1\n---\n%\n"}) {
    Status s = CheckYamlDocumentShape(text, "kubeconfig");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find("a directive ('%') inside the document (line "), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(CheckYamlDocumentShape("%YAML 1.2\n---\na: 1\n", "x").ok());
  EXPECT_TRUE(CheckYamlDocumentShape("a: \"%x\"\nb: 50%\n", "x").ok());
}

TEST(YamlGuard, ManifestsAndJsonPass) {
  for (const std::string text :
       {"apiVersion: v1\nkind: X\n", "# comment\n\n---\napiVersion: v1\n", "\"a\": 1\n, b\n",
        "a: 1\n, b\n", "a: 1\n[x] , b\n", "a:\n  - b\n  - c\n", "a: 1\n---\n", "a: 1\n...\n",
        "a: 1\n--- # end\n\n", "{\"apiVersion\": \"v1\", \"kind\": \"X\"}\n", "[1, 2]", "",
        "# only a comment\n", "a:b: c\n", "key with spaces: 1\n"}) {
    EXPECT_TRUE(CheckYamlDocumentShape(text, "job.yaml").ok()) << text;
  }
}

TEST(YamlGuard, FlowStyleRootMustBeJsonAndOneDocument) {
  EXPECT_FALSE(CheckYamlDocumentShape("{a: 1}\n", "x").ok());
  EXPECT_FALSE(CheckYamlDocumentShape("{\"a\": 1} , b\n", "x").ok());
  EXPECT_FALSE(CheckYamlDocumentShape("a: 1\n---\nb: 2\n", "x").ok());
  EXPECT_FALSE(CheckYamlDocumentShape("hello\n", "x").ok());
  EXPECT_FALSE(CheckYamlDocumentShape("- a\n- b\n", "x").ok());
}

TEST(YamlGuard, DeepFlowNestingIsRefusedBeforeYamlCppQueuesItsTokens) {
  Status s = CheckYamlDocumentShape("a: " + std::string(1 << 20, '['), "job.yaml");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nested deeper than 256"), std::string::npos) << s.message();
  EXPECT_TRUE(
      CheckYamlDocumentShape("a: " + std::string(256, '[') + std::string(256, ']'), "x").ok());
}

}  // namespace
}  // namespace ringtrain
