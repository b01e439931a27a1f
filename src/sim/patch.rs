//! TEMPORARY placeholder until the real module lands.
use serde_json::Value;
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("{0}")]
    Bad(String),
}
impl PatchError {
    pub fn is_bad_request(&self) -> bool {
        true
    }
}
pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    json_patch::merge(target, patch);
    Ok(())
}
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::Bad(e.to_string()))?;
    json_patch::patch(target, &p).map_err(|e| PatchError::Bad(e.to_string()))
}
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    merge_patch(target, patch)
}
