"""The ECR repository for the training image, and the URI of an image in it."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from constructs import Construct


def repository_image_uri(stack: Stack, repository: ecr.IRepository, tag: str) -> str:
    """The URI of ``repository``'s image ``tag``, for a repository in ``stack``'s account and region.

    Built here rather than with ``repository_uri_for_tag()``, whose ``Fn::Split`` of an imported
    ARN cfn-lint rejects.
    """
    return f"{stack.account}.dkr.ecr.{stack.region}.{stack.url_suffix}/{repository.repository_name}:{tag}"


class TrainingImageRepository(Construct):
    """Immutable-tag, scan-on-push, KMS-encrypted repository for the training image.

    Its lifecycle keeps the ``keep_images`` most recent images and, whatever their number, the
    image of ``deployed_tag``: jobs, nodes and the endpoint pull it by tag, and once expired the
    immutable tag could be pushed again with other content.

    Attributes:
        repository: The repository.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        repository_name: str,
        key: kms.IKey,
        keep_images: int,
        deployed_tag: str,
        retain: bool,
    ) -> None:
        """Create the repository.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            repository_name: Explicit lowercase name (stable across deploys).
            key: KMS key for image layers.
            keep_images: Images beyond this many most recent are expired, except ``deployed_tag``'s.
            deployed_tag: The tag that deploys run (``image.tag``); its image never expires.
            retain: Keep the repository and its images on ``cdk destroy`` (the default).
                ``False`` empties and deletes it (sandboxes only).
        """
        super().__init__(scope, construct_id)
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS,
            encryption_key=key,
            # ECR evaluates rules by priority, and an image that meets a rule's tag selection is
            # never expired by a lower-priority rule. The first rule selects exactly the deployed
            # tag (a pattern without wildcards: a prefix would also select "<tag>0") and expires
            # images past one; tags being immutable, at most one image holds it, so that rule
            # never expires it and the count rule cannot.
            lifecycle_rules=[
                ecr.LifecycleRule(
                    rule_priority=1,
                    description=f"Never expire {deployed_tag}, the tag deploys run",
                    tag_status=ecr.TagStatus.TAGGED,
                    tag_pattern_list=[deployed_tag],
                    max_image_count=1,
                ),
                ecr.LifecycleRule(
                    rule_priority=2,
                    description=f"Keep the {keep_images} most recent images",
                    max_image_count=keep_images,
                    tag_status=ecr.TagStatus.ANY,
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            empty_on_delete=not retain,
        )
