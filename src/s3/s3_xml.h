// The XML S3 speaks, read with expat into a small element tree: error bodies
// (Code, Message), ListObjectsV2 pages, multipart upload results. Namespaces
// are dropped from element names (S3 puts its own on every response).
//
// Thread safety: values; ParseXml may run concurrently.
#ifndef CKPTDB_SRC_S3_S3_XML_H_
#define CKPTDB_SRC_S3_S3_XML_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb {
namespace s3 {

struct XmlElement {
  std::string name;  // local name, without namespace
  std::string text;  // character data directly inside this element
  std::vector<XmlElement> children;

  // The first child named `name`, or nullptr.
  const XmlElement* Child(std::string_view child_name) const;
  // The text of the first child named `name`, or "" when there is none.
  std::string ChildText(std::string_view child_name) const;
};

// Parses a whole document; DataLoss naming `what` (e.g. "ListObjectsV2
// response of s3://b/p") when it is not well-formed XML.
StatusOr<XmlElement> ParseXml(std::string_view document, const std::string& what);

// Escapes text for an XML element's content.
std::string XmlEscape(std::string_view text);

// An S3 error body's Code and Message ("" each when the body is not one).
struct S3ErrorBody {
  std::string code;
  std::string message;
};
S3ErrorBody ParseS3Error(std::string_view body);

}  // namespace s3
}  // namespace ckptdb

#endif  // CKPTDB_SRC_S3_S3_XML_H_
