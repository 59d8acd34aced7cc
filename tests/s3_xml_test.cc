// S3's XML: error bodies, listings, escaping.
#include "s3/s3_xml.h"

#include <gtest/gtest.h>

namespace ckptdb {
namespace s3 {
namespace {

TEST(S3Xml, ErrorBodyCodeAndMessage) {
  auto e = ParseS3Error(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not "
      "exist.</Message><Key>a&amp;b</Key><RequestId>4442587FB7D0A2F9</RequestId></Error>");
  EXPECT_EQ(e.code, "NoSuchKey");
  EXPECT_EQ(e.message, "The specified key does not exist.");
  EXPECT_EQ(ParseS3Error("").code, "");
  EXPECT_EQ(ParseS3Error("<html>bad gateway").code, "");
  EXPECT_EQ(ParseS3Error("<Other><Code>X</Code></Other>").code, "");
}

TEST(S3Xml, NamespacedListing) {
  auto doc = ParseXml(
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>"
      "<Contents><Key>k1</Key><Size>3</Size></Contents><Contents><Key>k&lt;2</Key><Size>4</Size></Contents>"
      "</ListBucketResult>",
      "listing");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->name, "ListBucketResult");
  EXPECT_EQ(doc->ChildText("NextContinuationToken"), "tok");
  ASSERT_EQ(doc->children.size(), 5u);  // Name, IsTruncated, the token, two Contents
  EXPECT_EQ(doc->children[4].ChildText("Key"), "k<2");
  EXPECT_EQ(doc->ChildText("Missing"), "");
}

TEST(S3Xml, MalformedIsDataLossNamingWhat) {
  auto doc = ParseXml("<a><b></a>", "ListObjectsV2 response of s3://b/p");
  EXPECT_EQ(doc.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(doc.status().message().find("ListObjectsV2 response of s3://b/p"), std::string::npos) << doc.status();
  EXPECT_EQ(ParseXml("", "empty body").status().code(), StatusCode::kDataLoss);
}

TEST(S3Xml, EscapeRoundTrips) {
  const std::string text = "\"etag\" & <tag> 'q'";
  auto doc = ParseXml("<E>" + XmlEscape(text) + "</E>", "escaped");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->text, text);
}

}  // namespace
}  // namespace s3
}  // namespace ckptdb
