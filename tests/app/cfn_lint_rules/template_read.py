"""A cfn-lint rule (loaded with --append-rules) that reports each template it read and its resource count, so a
test can prove cfn-lint read every template rather than trusting silence."""

from cfnlint.rules import CloudFormationLintRule, RuleMatch

RULE_ID = "I9901"


class TemplateRead(CloudFormationLintRule):
    id = RULE_ID
    shortdesc = "Template read"
    description = "Reports every template cfn-lint read and how many resources it holds"
    source_url = "https://github.com/aws-cloudformation/cfn-lint"
    tags = ["inventory"]

    def match(self, cfn):
        return [RuleMatch(["Resources"], f"read {len(cfn.template.get('Resources', {}))} resources")]
