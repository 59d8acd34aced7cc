#include "s3/s3_xml.h"

#include <expat.h>

#include <cstring>

namespace ckptdb {
namespace s3 {

const XmlElement* XmlElement::Child(std::string_view child_name) const {
  for (const XmlElement& c : children) {
    if (c.name == child_name) return &c;
  }
  return nullptr;
}

std::string XmlElement::ChildText(std::string_view child_name) const {
  const XmlElement* c = Child(child_name);
  return c ? c->text : std::string();
}

namespace {

struct Builder {
  XmlElement root;
  std::vector<XmlElement*> open;  // the path from the root to the current element
  bool seen_root = false;
};

void OnStart(void* data, const XML_Char* name, const XML_Char** /*attributes*/) {
  auto* b = static_cast<Builder*>(data);
  // With namespace processing on, expat names are "uri name": keep the name.
  const char* local = std::strrchr(name, ' ');
  local = local ? local + 1 : name;
  if (b->open.empty()) {
    b->root.name = local;
    b->seen_root = true;
    b->open.push_back(&b->root);
    return;
  }
  XmlElement& parent = *b->open.back();
  parent.children.push_back(XmlElement{local, {}, {}});
  b->open.push_back(&parent.children.back());
}

void OnEnd(void* data, const XML_Char* /*name*/) {
  auto* b = static_cast<Builder*>(data);
  if (!b->open.empty()) b->open.pop_back();
}

void OnText(void* data, const XML_Char* s, int len) {
  auto* b = static_cast<Builder*>(data);
  if (!b->open.empty()) b->open.back()->text.append(s, static_cast<size_t>(len));
}

}  // namespace

StatusOr<XmlElement> ParseXml(std::string_view document, const std::string& what) {
  XML_Parser parser = XML_ParserCreateNS(nullptr, ' ');
  if (parser == nullptr) return Status::Internal("cannot create an XML parser for " + what);
  Builder builder;
  // `open` holds pointers into the tree: safe, because only the innermost
  // open element's vector grows, and no open element lives in it.
  XML_SetUserData(parser, &builder);
  XML_SetElementHandler(parser, OnStart, OnEnd);
  XML_SetCharacterDataHandler(parser, OnText);
  const XML_Status st = XML_Parse(parser, document.data(), static_cast<int>(document.size()), XML_TRUE);
  std::string error;
  if (st != XML_STATUS_OK) {
    error = std::string(XML_ErrorString(XML_GetErrorCode(parser))) + " at line " +
            std::to_string(XML_GetCurrentLineNumber(parser));
  }
  XML_ParserFree(parser);
  if (!error.empty()) return Status::DataLoss(what + " is not well-formed XML: " + error);
  if (!builder.seen_root) return Status::DataLoss(what + " is empty, expected an XML document");
  return std::move(builder.root);
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

S3ErrorBody ParseS3Error(std::string_view body) {
  if (body.empty()) return {};
  auto doc = ParseXml(body, "S3 error body");
  if (!doc.ok() || doc->name != "Error") return {};
  return {doc->ChildText("Code"), doc->ChildText("Message")};
}

}  // namespace s3
}  // namespace ckptdb
