//! What the workflow loader and the planner know of actions, through [`Catalog`]: each action's inputs
//! (names and docs, and the typed check of a rendered `with:`) and what the planner renders for it. The one
//! registry of actions (`actions::Registry`) implements it, so the workflow layer checks a step's `uses:` and
//! `with:`, and renders its manifests and charts, without depending on the actions that run them or
//! matching on their names.

use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// One input of an action (`with:` key).
#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub name: &'static str,
    pub required: bool,
    pub doc: &'static str,
}

/// What the planner renders for a step of an action, beyond its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renders {
    /// Nothing: the step's inputs are all it runs with.
    Nothing,
    /// The manifest template its `template` input names: the step's `objects`.
    Manifest,
    /// The chart its `chart` input names, into its `namespace` input, on its `cluster`.
    Chart,
    /// Always this chart into this namespace, on its `cluster` (for its `managedCluster`).
    FixedChart {
        chart: &'static str,
        namespace: &'static str,
    },
}

/// Why a rendered `with:` does not fit an action's inputs: the input (`None`: the whole `with:`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub input: Option<String>,
    pub message: String,
}

/// Checks a rendered `with:` (a JSON object) against an action's input type.
pub type CheckInputs = fn(&Value) -> Result<(), InputError>;

/// What the loader and the planner know of one action.
#[derive(Debug, Clone, Copy)]
pub struct ActionInfo {
    pub inputs: &'static [Input],
    /// Deserializes the rendered inputs into the action's input type ([`check_inputs`]).
    pub check: CheckInputs,
    pub renders: Renders,
    /// Its `keep` input is the planner's: per cluster, the id of every object the plan applies.
    pub planner_fills_keep: bool,
}

/// The actions a workflow may use, as the loader and the planner see them.
pub trait Catalog {
    /// The action named `name`, or `None` when there is no such action.
    fn action(&self, name: &str) -> Option<ActionInfo>;
    /// Every action's name (for "did you mean").
    fn names(&self) -> Vec<&'static str>;
}

/// A [`CheckInputs`] for the input type `T`: the rendered `with:` must deserialize into it. The error names
/// the input at fault, so the planner can point at it in the workflow file.
pub fn check_inputs<T: DeserializeOwned>(with: &Value) -> Result<(), InputError> {
    serde_path_to_error::deserialize::<_, T>(with)
        .map(drop)
        .map_err(|e| {
            let path = e.path().to_string();
            InputError {
                input: (path != ".").then(|| path.split('.').next().unwrap_or(&path).to_owned()),
                message: e.into_inner().to_string(),
            }
        })
}

/// Deserializes a flag written as a YAML boolean or as the text a template renders (`"true"`, `"false"`).
pub fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Text(String),
    }
    match Option::<Flag>::deserialize(d)? {
        None => Ok(None),
        Some(Flag::Bool(b)) => Ok(Some(b)),
        Some(Flag::Text(t)) => match t.trim() {
            "true" | "True" => Ok(Some(true)),
            "false" | "False" => Ok(Some(false)),
            other => Err(serde::de::Error::custom(format!(
                "`{other}` is not true or false"
            ))),
        },
    }
}
